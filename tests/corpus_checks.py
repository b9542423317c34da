def failed(result) -> set:
    return {c["id"] for c in result["checks"] if not c["passed"]}


def isolating(mistakes: dict, check_ids, alongside=("reference_agreement",)) -> dict:
    """check id -> the corpus mistakes that lose exactly it (``alongside`` allowed with it)."""
    found = {c: [] for c in check_ids}
    for name, m in mistakes.items():
        own = set(m.fails) - set(alongside) or set(m.fails)
        if len(own) == 1 and next(iter(own)) in found:
            found[next(iter(own))].append(name)
    return found
