"""Test doubles of the trainers this library plugs into (Slime, Miles), one module per part of their contract.

Neither trainer can run here (torch+CUDA, Megatron, Ray, SGLang). Each double is written from the trainer's
source at a pinned commit (named in its module docstring), not copied, and asserts the rules the trainer
relies on. Import them as `from doubles import slime_double`.
"""
