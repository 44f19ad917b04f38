"""The shop agent's two tools: a price list it has never seen, and a calculator.

Each tool is a plain typed function whose docstring describes its arguments
(Args:); rlab turns them into the JSON schemas the policy sees and runs them
in an isolated process (time limit, memory cap, output scrubbed and capped).
"""

PRICES = {"lamp": 23, "mug": 7, "chair": 41, "desk": 87, "pen": 3, "book": 12, "kettle": 29, "rug": 64}


def price(item: str) -> int:
    """The price of one item, in euros.

    Args:
        item: the item's name, e.g. "lamp"
    """
    if item not in PRICES:
        raise ValueError(f"no item {item!r}; the items: {', '.join(PRICES)}")
    return PRICES[item]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b
