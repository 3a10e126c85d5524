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
