"""The disaggregation arguments of SGLang's server (see ../README.md)."""
import argparse

from sglang.srt.arg_groups.choices import (  # noqa: F401 (re-exported)
    DISAGG_TRANSFER_BACKEND_CHOICES)


def parser():
    p = argparse.ArgumentParser(prog="sglang")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--disaggregation-mode", default="null",
                   choices=["null", "prefill", "decode"])
    p.add_argument("--disaggregation-transfer-backend", default="mooncake",
                   choices=DISAGG_TRANSFER_BACKEND_CHOICES)
    return p
