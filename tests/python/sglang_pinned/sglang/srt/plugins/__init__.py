"""SGLang's general plugins, as kvwire's tests need them (see
../../../README.md): load_plugins() calls every entry point of the group
sglang.srt.plugins once per process, then applies the registered hooks."""
from importlib.metadata import entry_points

from sglang.srt.plugins.hook_registry import HookRegistry

GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
_plugins_loaded = False


def load_plugins():
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=GENERAL_PLUGINS_GROUP):
        ep.load()()
    HookRegistry.apply_hooks()
