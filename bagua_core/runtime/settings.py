"""``settings``: what a plugin reads of the job's settings, as the rest of bagua reads them (``docs/environment.md``).

Each is read when asked (a test or a launcher may set the variable late), from :mod:`bagua_core.runtime.env`:

- ``settings.default_bucket_size()``: ``BAGUA_DEFAULT_BUCKET_SIZE`` in bytes (10 MiB unless set);
- ``settings.comm_timeout_s()``: ``BAGUA_COMM_TIMEOUT_S``, how long a collective may take before it fails;
- ``settings.nonfinite_policy()``: ``BAGUA_NONFINITE``, what a compressed exchange does with NaN/Inf
  (``"propagate"`` or ``"raise"``);
- ``settings.local_size()``: the ranks on this node (the membership found at ``init_process_group``, else
  torchrun's ``LOCAL_WORLD_SIZE``).

Example::

    >>> from bagua_core.api import settings
    >>> deadline = time.monotonic() + settings.comm_timeout_s()
"""

from __future__ import annotations

from bagua_core.runtime import env

__all__ = ["settings"]


class Settings:
    """The job's settings a plugin reads (module doc); ``settings`` is the one instance."""

    @staticmethod
    def default_bucket_size() -> int:
        return env.get_default_bucket_size()

    @staticmethod
    def comm_timeout_s() -> float:
        return env.get_comm_timeout_s()

    @staticmethod
    def nonfinite_policy() -> str:
        return env.get_nonfinite_policy()

    @staticmethod
    def local_size() -> int:
        return env.get_local_size()


settings = Settings()
