"""Kernel micro-benchmarks: each kernel against the plain-mx path it replaces.

A measuring tool, not part of the product: nothing in kernels/ or engine/ imports it
and the app bundle leaves it out. Run ``python -m kernels.bench.<name>`` with name one
of gated_delta_step, gated_delta_chunk, paged_attention, moe_route (GPU only).
"""
