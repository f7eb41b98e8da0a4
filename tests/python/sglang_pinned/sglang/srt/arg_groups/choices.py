"""The backend choices argparse offers (see ../../README.md)."""
DISAGG_TRANSFER_BACKEND_CHOICES = ["mooncake", "nixl", "ascend", "fake",
                                   "mori"]
