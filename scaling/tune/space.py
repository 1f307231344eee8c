"""What ``scaling tune`` searches: frameworks x launchers x per-device batch x options.

A configuration sets each knob to a value or leaves it at its default. Options are the
frameworks' (precision, layout, XLA) and the launchers' communication knobs; the default
values tried are every value of a choice, both values of a switch, and a number's ``tune``
values (:class:`scaling.launchers.Number`), each beside the option left unset. A space file
(YAML) replaces any of these lists::

    frameworks: [torch]
    launchers: [torchrun, horovod]
    batch_sizes: [16, 32, max]        # max, max*F: from the max-batch search
    options:
      bucket_cap_mb: [default, 10, 50]
      fusion_threshold_mb: {low: 8, high: 128}   # 8, 16, 32, 64, 128
      comm_hook: [none, fp16]
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import yaml

from scaling.errors import ScalingError
from scaling.frameworks import framework_names, get_framework
from scaling.launchers import (LAUNCHERS, Number, check_options, default_python, launchers_of,
                               valid_options)
from scaling.sweep import SYMBOLIC_BATCH

DEFAULT = "default"
"""A knob's value that leaves it unset: the framework's or launcher's own default."""

NOT_SEARCHED = {"compile": "compiling adds minutes to every trial",
                "timeline": "a trace for reading, not a setting",
                "donate": "donation only saves memory"}
"""Options left out of the default space, with the reason; a space file may add them."""

SAME_AS_UNSET = {"amp": False, "channels_last": False, "xla": False, "mixed_precision": False,
                 "gradient_as_bucket_view": False, "static_graph": False,
                 "broadcast_buffers": True, "comm_hook": "none", "compression": "none",
                 "cross_device_ops": "auto"}
"""Values that do what leaving the option unset does (its documented default): the default
space leaves them out, so that no trial, and no ablation, is spent on a setting that changes
nothing."""

GPU_OPTIONS = {"cudnn_benchmark"}
"""Framework options that do nothing on CPU devices."""

DEFAULT_BATCHES = {"cpu": [16, 32], "gpu": ["max*0.5", "max"]}
"""Per-device batches tried when neither the command nor the space file gives any."""


@dataclass(frozen=True)
class Config:
    """One point of the space: the options it sets (the others at their defaults)."""

    framework: str
    launcher: str
    batch_size: Any
    options: Tuple[Tuple[str, Any], ...] = ()

    def knobs(self) -> Dict[str, Any]:
        return {"framework": self.framework, "launcher": self.launcher,
                "batch_size": self.batch_size, **dict(self.options)}

    def label(self) -> str:
        settings = " ".join(f"{key}={str(value).lower()}" for key, value in self.options)
        return f"{self.framework}/{self.launcher} batch {self.batch_size}" + \
            (f" {settings}" if settings else "")


def make_config(framework: str, launcher: str, batch_size, options: Dict) -> Config:
    """A configuration whose options are those of ``options`` that apply to the framework and
    launcher, in a fixed order."""
    valid = valid_options(LAUNCHERS.get(launcher), framework)
    return Config(framework, launcher, batch_size,
                  tuple(sorted((key, value) for key, value in options.items()
                               if key in valid and value != DEFAULT)))


@dataclass
class Space:
    frameworks: List[str]
    launchers: Dict[str, List[str]]
    """Framework -> the launchers it is tried under."""
    batch_sizes: List[Any]
    options: Dict[str, List[Any]] = field(default_factory=dict)
    """Knob -> its values (``default`` among them: unset)."""
    left_out: Dict[str, str] = field(default_factory=dict)
    """Launcher -> why the default space leaves it out (not built here)."""

    def pairs(self) -> List[Tuple[str, str]]:
        return [(framework, launcher) for framework in self.frameworks
                for launcher in self.launchers[framework]]

    def default(self) -> Config:
        """The configuration people run without tuning: the first framework under its own
        launcher (or the first one tried), the first batch, every option at its default."""
        framework = self.frameworks[0]
        own = get_framework(framework).default_launcher
        launchers = self.launchers[framework]
        return Config(framework, own if own in launchers else launchers[0], self.batch_sizes[0])

    def choices(self, framework: str, launcher: str) -> Dict[str, List[Any]]:
        """Each knob's values that ``framework`` under ``launcher`` takes."""
        spec = LAUNCHERS.get(launcher)
        valid = valid_options(spec, framework)
        return {key: [value for value in values
                      if value == DEFAULT or _takes(spec, framework, key, value)]
                for key, values in self.options.items() if key in valid}

    def configs(self) -> Iterator[Config]:
        for framework, launcher in self.pairs():
            choices = self.choices(framework, launcher)
            for batch, values in itertools.product(self.batch_sizes,
                                                   itertools.product(*choices.values())):
                yield make_config(framework, launcher, batch, dict(zip(choices, values)))

    def size(self) -> int:
        return len(set(self.configs()))

    def sample(self, count: int, seed: int) -> List[Config]:
        """The default configuration, then up to ``count - 1`` others (the same ones for the
        same seed): by turns, one that changes a single knob of the default and one drawn at
        random from the whole space."""
        first = self.default()
        rng = random.Random(seed)
        near = sorted({config for config in self.configs()
                       if config != first and len(changed(config, first)) == 1},
                      key=Config.label)
        far = sorted(set(self.configs()) - set(near) - {first}, key=Config.label)
        rng.shuffle(near)
        rng.shuffle(far)
        turns = itertools.chain.from_iterable(itertools.zip_longest(near, far))
        return [first, *[config for config in turns if config is not None][:count - 1]]

    def describe(self) -> Dict[str, Any]:
        return {"frameworks": self.frameworks, "launchers": self.launchers,
                "batch_sizes": self.batch_sizes, "options": self.options,
                "left_out": self.left_out}


def changed(config: Config, default: Config) -> List[str]:
    """The knobs ``config`` sets otherwise than ``default``."""
    knobs, base = config.knobs(), default.knobs()
    return [key for key in {**base, **knobs} if knobs.get(key) != base.get(key)]


def option_values(name: str, allowed, device_type: str, gpu_only) -> Optional[List[Any]]:
    """The values of option ``name`` searched by default (``default`` first), or None for an
    option left out."""
    if name in NOT_SEARCHED or (name in GPU_OPTIONS and device_type != "gpu"):
        return None
    if device_type != "gpu" and name in gpu_only and gpu_only[name] is None:
        return None
    if isinstance(allowed, Number):
        values = list(allowed.tune)
    elif isinstance(allowed, tuple):
        refused = gpu_only.get(name) or () if device_type != "gpu" else ()
        values = [value for value in allowed if value not in refused]
    elif allowed is bool:
        values = [False, True]
    else:
        return None
    values = [value for value in values if not (
        name in SAME_AS_UNSET and type(value) is type(SAME_AS_UNSET[name])
        and value == SAME_AS_UNSET[name])]
    return [DEFAULT, *values] if values else None


def default_space(frameworks: List[str], launchers: Optional[List[str]], devices: int,
                  device_type: str, batch_sizes: Optional[List] = None) -> Space:
    """Every launcher of each framework that drives ``devices`` devices and is built here
    (or those of ``launchers``), and the options they take, at their default values."""
    per_framework, left_out = {}, {}
    for framework in frameworks:
        names = [name for name in launchers_of(framework)
                 if (launchers is None or name in launchers)
                 and (LAUNCHERS.get(name).max_devices or devices) >= devices]
        if launchers is None:
            for name in names:
                why = LAUNCHERS.get(name).missing(framework, default_python(framework, name))
                if why:
                    left_out[f"{framework}/{name}"] = why
            names = [name for name in names if f"{framework}/{name}" not in left_out
                     and (devices == 1 or LAUNCHERS.get(name).max_devices is None)]
        if not names:
            raise ScalingError(f"no launcher given starts {framework} on {devices} devices; "
                               f"{framework} launchers: {', '.join(launchers_of(framework))}")
        per_framework[framework] = names
    options = {}
    for framework in frameworks:
        for launcher in per_framework[framework]:
            spec = LAUNCHERS.get(launcher)
            for name, allowed in valid_options(spec, framework).items():
                values = option_values(name, allowed, device_type, spec.gpu_only)
                if values:
                    options[name] = list(dict.fromkeys([*options.get(name, []), *values]))
    return Space(frameworks, per_framework, batch_sizes or DEFAULT_BATCHES[device_type],
                 options, left_out)


SPACE_KEYS = ("frameworks", "launchers", "batch_sizes", "options")


def load_space(path, make_base: Callable[[Optional[List[str]]], Space],
               frameworks_given: bool, launchers_given: bool) -> Space:
    """The default space of the file's frameworks (``make_base(None)``: the command line's),
    with the lists that the space file at ``path`` gives in their place; the command line's
    --framework and --launcher win over the file's."""
    try:
        with open(path) as text:
            data = yaml.safe_load(text) or {}
    except OSError as error:
        raise ScalingError(f"cannot read space file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ScalingError(f"{path}: not valid YAML ({error.problem})") from None
    if not isinstance(data, dict) or set(data) - set(SPACE_KEYS):
        raise ScalingError(f"{path}: a space file maps some of {', '.join(SPACE_KEYS)} to "
                           f"their values; got {sorted(data) if isinstance(data, dict) else data!r}")
    frameworks = None
    if "frameworks" in data and not frameworks_given:
        frameworks = _values(data, "frameworks", str(path))
        for name in frameworks:
            if name not in framework_names():
                raise ScalingError(f"{path}: unknown framework {name!r}; valid: "
                                   f"{', '.join(framework_names())}")
    return parse_space(data, make_base(frameworks), str(path), frameworks_given,
                       launchers_given)


def parse_space(data: Dict, base: Space, where: str, frameworks_given: bool = False,
                launchers_given: bool = False) -> Space:
    frameworks = base.frameworks if frameworks_given or "frameworks" not in data \
        else _values(data, "frameworks", where)
    launchers = {framework: base.launchers.get(framework) or launchers_of(framework)
                 for framework in frameworks}
    if "launchers" in data and not launchers_given:
        wanted = _values(data, "launchers", where)
        launchers = {framework: [name for name in launchers_of(framework) if name in wanted]
                     for framework in frameworks}
        for name in wanted:
            if name not in LAUNCHERS or not any(name in found for found in launchers.values()):
                raise ScalingError(f"{where}: launcher {name!r} starts none of "
                                   f"{', '.join(frameworks)}; valid: " + ", ".join(sorted(
                                       {n for f in frameworks for n in launchers_of(f)})))
    batches = _batches(data, where) if "batch_sizes" in data else base.batch_sizes
    space = Space(frameworks, launchers, batches,
                  {key: values for key, values in base.options.items()
                   if _applies(key, frameworks, launchers)}, base.left_out)
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise ScalingError(f"{where}: options maps each knob to a list of values or "
                           "{low: L, high: H}")
    for key, given in options.items():
        space.options[key] = _knob_values(key, given, space, where)
    return space


def _takes(launcher, framework: str, key: str, value) -> bool:
    try:
        check_options(launcher, framework, {key: value})
    except ScalingError:
        return False
    return True


def _values(data: Dict, key: str, where: str) -> List:
    values = data[key] if isinstance(data[key], list) else [data[key]]
    if not values:
        raise ScalingError(f"{where}: {key} is empty; give at least one value")
    return values


def _batches(data: Dict, where: str) -> List:
    batches = _values(data, "batch_sizes", where)
    for batch in batches:
        symbolic = isinstance(batch, str) and SYMBOLIC_BATCH.fullmatch(batch)
        if not symbolic and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ScalingError(f"{where}: batch size {batch!r} is neither a positive integer "
                               "nor max or max*F with 0 < F <= 1")
    return batches


def _applies(key: str, frameworks: List[str], launchers: Dict[str, List[str]]) -> bool:
    return any(key in valid_options(LAUNCHERS.get(launcher), framework)
               for framework in frameworks for launcher in launchers[framework])


def _knob_values(key: str, given, space: Space, where: str) -> List:
    """A knob's values from the space file, each checked as the option it sets."""
    pairs = [(framework, launcher) for framework, launcher in space.pairs()
             if key in valid_options(LAUNCHERS.get(launcher), framework)]
    if not pairs:
        valid = sorted({name for framework, launcher in space.pairs()
                        for name in valid_options(LAUNCHERS.get(launcher), framework)})
        raise ScalingError(f"{where}: unknown knob {key!r} for "
                           f"{', '.join(f'{f}/{l}' for f, l in space.pairs())}; valid knobs: "
                           f"{', '.join(valid)}")
    values = _range(key, given, where) if isinstance(given, dict) else \
        (given if isinstance(given, list) else [given])
    if not values:
        raise ScalingError(f"{where}: knob {key} has no values")
    framework, launcher = pairs[0]
    for value in values:
        if value != DEFAULT:
            try:
                check_options(LAUNCHERS.get(launcher), framework, {key: value})
            except ScalingError as error:
                raise ScalingError(f"{where}: {error}") from None
    return list(dict.fromkeys(values))


def _range(key: str, given: Dict, where: str) -> List:
    """``{low: L, high: H}``: L, 2L, 4L, ... up to H, and H."""
    low, high = given.get("low"), given.get("high")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    if set(given) != {"low", "high"} or not numbers:
        raise ScalingError(f"{where}: knob {key}: a range is {{low: L, high: H}} with numbers, "
                           f"got {given!r}")
    if low <= 0 or high < low:
        raise ScalingError(f"{where}: knob {key}: impossible range {low}..{high}; need "
                           "0 < low <= high")
    values, value = [], low
    while value < high:
        values.append(value)
        value *= 2
    return [*values, high]
