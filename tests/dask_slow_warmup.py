"""A `dask worker --preload` of tests/test_dask_cluster.py: this worker's judge warm-up (Grading's fork server)
takes WARMUP_SECONDS longer, as it does on a loaded machine, so a test can tell whether the warm-up stops the
worker's heartbeats (a worker dropped while it registers the plugin) or not."""
import time

from attnkit.isolation import sandbox

WARMUP_SECONDS = 12.0              # past a 5 s worker-ttl and its 5 s check interval, whatever their phase
# Dask imports a preload file more than once (and reloads it): wrap the kit's own prestart only, once.
_prestart = getattr(sandbox.prestart, "unslowed", sandbox.prestart)


def _slow_prestart(*args, **kwargs):
    time.sleep(WARMUP_SECONDS)
    return _prestart(*args, **kwargs)


_slow_prestart.unslowed = _prestart
sandbox.prestart = _slow_prestart
