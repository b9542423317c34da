"""A check's verdict: ``require(condition, sentence)`` fails the check with a sentence for the student."""


class CheckFailed(AssertionError):
    """A check's verdict: the property does not hold. The message is for the student."""


def require(condition, message: str) -> None:
    if not condition:
        raise CheckFailed(message)
