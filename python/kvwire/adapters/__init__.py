"""Thin adapters that plug the kvwire package into engines: sglang.py
(SGLang's transfer-backend classes) and vllm.py (a vLLM v1 KV connector).
NOT TESTED against those engines: they import the engines' base classes
when present and follow their documented interfaces; see python/README.md.
"""
