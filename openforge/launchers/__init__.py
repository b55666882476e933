"""Sandboxes: the `Launcher` / `Sandbox` seam (`base`), the local bubblewrap launcher and the Kubernetes one."""
