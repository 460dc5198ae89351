"""The shipped components, each module a plugin registered exactly like a third-party one."""
