"""execute_reply contents for envd's own wrapper kernels (bash, Java).

Both are ipykernel Kernel subclasses that answer execute_request themselves;
these build the two replies they send, the same way in both.
"""


class Replies:
    """Mixin for an ipykernel.kernelbase.Kernel subclass."""

    def _error(self, ename, evalue, traceback=None):
        """Publish an error on iopub and return the matching error reply."""
        content = {"ename": ename, "evalue": evalue, "traceback": list(traceback or [])}
        self.send_response(self.iopub_socket, "error", content)
        reply = dict(content)
        reply["status"] = "error"
        reply["execution_count"] = self.execution_count
        return reply

    def _ok(self):
        """The reply of an execution that went well."""
        return {
            "status": "ok",
            "execution_count": self.execution_count,
            "payload": [],
            "user_expressions": {},
        }
