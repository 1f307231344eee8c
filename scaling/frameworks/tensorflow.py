"""TensorFlow with Keras: workers in the harness's own interpreter."""

from scaling.frameworks.base import Framework, register_framework

register_framework(Framework(
    name="tensorflow",
    module="tensorflow",
    install_hint="install it with: pip install -e '.[tensorflow]'",
    worker="scaling.workers.tensorflow",
    models="workloads.keras_models",
    default_launcher="tf-mirrored",
    options={"xla": bool, "mixed_precision": bool},
    env={"TF_CPP_MIN_LOG_LEVEL": "1", "KERAS_BACKEND": "tensorflow"},
    # The cap is the BFC allocator's, which the start-up does not use; 64 MiB trains cifar10.
    min_memory_limit=64 * 2**20,
    packages=("tensorflow", "tensorflow-cpu", "keras"),
    colour="#ff7f0e",
))
