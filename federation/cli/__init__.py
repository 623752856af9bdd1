"""fedctl: the command-line client for users and tenant-quota administrators."""
