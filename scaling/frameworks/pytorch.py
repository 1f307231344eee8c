"""PyTorch: workers in the harness's own interpreter."""

from scaling.frameworks import Framework, register_framework

register_framework(Framework(
    name="torch",
    module="torch",
    install_hint="install it with: pip install -e '.[torch]'",
    worker="scaling.workers.torch_worker",
    default_launcher="torchrun",
    # Measured: the torch 2.14 build's libraries take most of it; 896 MiB failed to start.
    min_memory_limit=2**30,
))
