"""PyTorch: workers in the harness's own interpreter."""

from scaling.frameworks.base import Framework, register_framework

register_framework(Framework(
    name="torch",
    module="torch",
    install_hint="install it with: pip install -e '.[torch]'",
    worker="scaling.workers.pytorch",
    models="workloads.torch_models",
    default_launcher="torchrun",
    options={
        # true: bf16 autocast on CPU, fp16 autocast with a gradient scaler on GPU.
        "amp": (True, False, "fp16", "bf16"),
        "channels_last": bool,
        # torch.compile; compilation runs before the warm-up, out of the timed window.
        "compile": bool,
        "cudnn_benchmark": bool,
    },
    # Measured: the torch 2.14 build's libraries take most of it; 896 MiB failed to start.
    min_memory_limit=2**30,
    packages=("torch", "torchvision"),
    colour="#d62728",
))
