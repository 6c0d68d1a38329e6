"""Every problem code the product source can raise, read from the source (AST)."""

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "fleet", "tenants", "billing", "health", "planning", "devtools", "config")
# Arguments that pass on a code another raise already named (re-raising a domain error as a problem).
PASS_THROUGH = {"code", "exc.code"}


def _sources():
    for app in PRODUCT:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text(), filename=str(path))


def _name(func) -> str | None:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


@cache  # parsing ~500 modules takes seconds; the tests share one reading
def raised_codes() -> tuple[dict[str, set[str]], list[str]]:
    """({code: {file, …}}, [non-literal code arguments that are not pass-throughs])."""
    trees = list(_sources())
    domain = {"DomainError"}
    grew = True
    while grew:  # every subclass of DomainError, however deep
        grew = False
        for _, tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in domain:
                    if {_name(base) for base in node.bases} & domain:
                        domain.add(node.name)
                        grew = True
    # callables taking a `code` positionally: Problem(status, code, …), BillingRunError(code, …)
    positional: dict[str, int] = {}
    defaulted: list = []
    for path, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        params = [a.arg for a in item.args.args][1:]
                        if "code" in params:
                            positional[node.name] = params.index("code")
                            # a default code is raised by every call that names none
                            defaults = dict(zip(reversed(params), reversed(item.args.defaults)))
                            if "code" in defaults and ast.unparse(defaults["code"]) != "None":
                                defaulted.append((node.name, defaults["code"], path))
            elif isinstance(node, ast.FunctionDef) and node.name.startswith("problem"):
                params = [a.arg for a in node.args.args]
                if "code" in params:
                    positional[node.name] = params.index("code")
    codes: dict[str, set[str]] = {}
    computed: list[str] = []

    def found(value, where):
        if isinstance(value, ast.IfExp):  # "a" if … else "b": both can be raised
            found(value.body, where)
            found(value.orelse, where)
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            codes.setdefault(value.value, set()).add(where)
        elif ast.unparse(value) not in PASS_THROUGH:
            computed.append(f"{where}:{value.lineno}: {ast.unparse(value)}")

    for _owner, default, path in defaulted:
        found(default, str(path.relative_to(ROOT)))
    for path, tree in trees:
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in domain:
                for item in node.body:
                    if isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "code" for t in item.targets):
                        found(item.value, where)
            elif isinstance(node, ast.Call):
                callee = _name(node.func)
                if callee in positional and len(node.args) > positional[callee]:
                    found(node.args[positional[callee]], where)
                if callee in positional or callee in domain:
                    for keyword in node.keywords:
                        if keyword.arg == "code":
                            found(keyword.value, where)
    return codes, computed
