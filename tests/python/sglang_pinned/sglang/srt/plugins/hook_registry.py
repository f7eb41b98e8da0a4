"""SGLang's hook registry, as kvwire's tests need it (see
../../../README.md): AROUND hooks on a module-level function, applied once,
and propagated to every module that imported the original by name."""
import enum
import functools
import importlib
import sys
import types


class HookType(enum.Enum):
    AROUND = "around"


class HookRegistry:
    _hooks = {}
    _patched = set()

    @classmethod
    def register(cls, target, hook, hook_type=HookType.AROUND):
        if hook_type is not HookType.AROUND:
            raise NotImplementedError("this stand-in has AROUND hooks only")
        cls._hooks.setdefault(target, []).append(hook)

    @classmethod
    def apply_hooks(cls):
        for target, hooks in cls._hooks.items():
            if target in cls._patched:
                continue
            mod_name, attr = target.rsplit(".", 1)
            mod = importlib.import_module(mod_name)
            original = wrapped = getattr(mod, attr)
            for hook in hooks:
                wrapped = _around(wrapped, hook)
            setattr(mod, attr, wrapped)
            for other in list(sys.modules.values()):
                if isinstance(other, types.ModuleType) and other is not mod:
                    for k, v in list(vars(other).items()):
                        if v is original:
                            setattr(other, k, wrapped)
            cls._patched.add(target)


def _around(fn, hook):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return hook(fn, *args, **kwargs)
    return wrapper
