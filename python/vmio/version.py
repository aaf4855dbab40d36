"""vmio's version: the installed distribution's, "0+unknown" in a source tree that was never
installed. `vmio.__version__` is this; modules inside the package import it from here (the
package's `__init__` names nearly every module, so importing it back would be a cycle). The
command line looks it up only for `--version`: `importlib.metadata` is slow to import."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

try:
    __version__ = _dist_version("vmio")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
