"""Human-readable rendering of a judge result."""


def result_table(result: dict) -> str:
    rows = [f"{result['assignment']}: {result['score']:g} / {result['max_score']:g}"]
    if result.get("error"):
        rows.append(f"  error: {result['error']}")
    width = max(len(c["id"]) for c in result["checks"])
    for c in result["checks"]:
        mark = "PASS" if c["passed"] else "FAIL"
        rows.append(f"  {mark}  {c['id']:<{width}}  {c['points']:g}/{c['max_points']:g}"
                    + ("" if c["passed"] else f"  {c['message']}"))
        if c.get("diagnosis"):
            rows.append(f"        {'':<{width}}  diagnosis: {c['diagnosis']}")
    return "\n".join(rows)


def class_table(rows: list[tuple[str, float, float, str]]) -> str:
    """rows: (student, score, max_score, note)."""
    width = max([len("student")] + [len(r[0]) for r in rows])
    out = [f"{'student':<{width}}  {'score':>11}  failed checks"]
    for student, score, max_score, note in rows:
        out.append(f"{student:<{width}}  {score:>5g} / {max_score:<3g}  {note}")
    return "\n".join(out)
