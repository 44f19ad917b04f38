"""The calculator scenario's tools: two typed functions the policy may call.

Their JSON schemas (what the policy sees) come from the signatures and the
docstrings' Args sections. They run in the tool process, never in the engine.
"""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b
