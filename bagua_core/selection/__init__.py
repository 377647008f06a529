"""Selection: which algorithm a job runs, with which settings.

``config`` (an algorithm from a name, a dict, a config model or a file; the discriminated union over
every installed algorithm), ``autotune`` (bucket sizes tuned while training) and ``single_node``
(whether the job runs on one node, and what an algorithm's hierarchical default means there).
Imports the runtime, the plugins and the lifecycle; the wrapped module (``bagua_core.module``) is above.
"""
