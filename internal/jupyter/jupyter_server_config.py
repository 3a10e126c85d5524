# Written by envd into JUPYTER_CONFIG_DIR; Jupyter Server loads it at start.
#
# Tornado leaves Nagle's algorithm on for the kernel WebSocket. The server
# writes several small frames per request, so with the client's delayed ACK
# every execute round trip waits ~40 ms. Turning TCP_NODELAY on when the
# channel socket opens brings the round trip down to ~5 ms.
from jupyter_server.services.kernels.handlers import ZMQChannelsHandler

_envd_orig_open = ZMQChannelsHandler.open


def _envd_open_nodelay(self, *args, **kwargs):
    self.set_nodelay(True)
    return _envd_orig_open(self, *args, **kwargs)


ZMQChannelsHandler.open = _envd_open_nodelay

# The server's first look at the python3 kernelspec (to list kernelspecs or
# to start a kernel) imports ipykernel.kernelspec, and with it debugpy and
# pkg_resources: half a second on its event loop on an idle machine,
# seconds on a loaded one, during which it answers nothing. The import only
# serves to tell whether the spec is ipykernel's built-in one; a python3
# kernelspec installed on disk (Debian's) is read from its kernel.json, as
# the server does for every other kernelspec. ipykernel's directory is
# found without importing it.
import importlib.util as _envd_importlib_util
import os as _envd_os_ks

from jupyter_client import kernelspec as _envd_kernelspec

_envd_ipykernel = _envd_importlib_util.find_spec("ipykernel")
_envd_ipykernel_resources = (
    _envd_os_ks.path.join(list(_envd_ipykernel.submodule_search_locations)[0], "resources")
    if _envd_ipykernel and _envd_ipykernel.submodule_search_locations
    else None
)
_envd_orig_spec_by_name = _envd_kernelspec.KernelSpecManager._get_kernel_spec_by_name


def _envd_spec_by_name(self, kernel_name, resource_dir):
    if (
        kernel_name == _envd_kernelspec.NATIVE_KERNEL_NAME
        and _envd_ipykernel_resources
        and _envd_os_ks.path.realpath(resource_dir) != _envd_os_ks.path.realpath(_envd_ipykernel_resources)
    ):
        kspec = self.kernel_spec_class.from_resource_dir(resource_dir)
        if not _envd_kernelspec.KPF.instance(parent=self.parent).is_provisioner_available(kspec):
            raise _envd_kernelspec.NoSuchKernel(kernel_name)
        return kspec
    return _envd_orig_spec_by_name(self, kernel_name, resource_dir)


_envd_kernelspec.KernelSpecManager._get_kernel_spec_by_name = _envd_spec_by_name

# The kernelspec directories' default is computed without importing
# IPython (which the original does to find IPython's directory): another
# 300 ms on the server's event loop at its first kernelspec lookup. The
# same list: Jupyter's data path, then IPython's directory (IPYTHONDIR,
# else ~/.ipython). (kernel_dirs is not configurable, hence the patch.)
from jupyter_core.paths import jupyter_path as _envd_jupyter_path


def _envd_kernel_dirs_default(self):
    ipython_dir = _envd_os_ks.environ.get("IPYTHONDIR") or _envd_os_ks.path.expanduser("~/.ipython")
    return _envd_jupyter_path("kernels") + [_envd_os_ks.path.join(ipython_dir, "kernels")]


_envd_kernelspec.KernelSpecManager._kernel_dirs_default = _envd_kernel_dirs_default
