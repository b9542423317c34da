def failed(result) -> set:
    return {c["id"] for c in result["checks"] if not c["passed"]}


