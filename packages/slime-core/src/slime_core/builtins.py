"""The core's own plugin: core options and the built-in data source and buffer filter.

Built-ins are registered exactly like third-party plugins; references are strings so that
importing this module stays cheap.
"""

from slime_core import hookimpl
from slime_core.config.core_options import add_core_options


@hookimpl
def slime_add_options(options):
    add_core_options(options)


@hookimpl
def slime_register_data_sources(register):
    register("prompt", "slime_core.data.source:PromptDataSource")


@hookimpl
def slime_register_buffer_filters(register):
    register("fifo", "slime_core.data.buffer:take_oldest")
