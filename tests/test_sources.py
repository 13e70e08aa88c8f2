"""The sources speak of the project itself: no file cites a planning document the repository does
not hold (the paper and the project's own docs are cited by name)."""

from conftest import ROOT


def test_no_source_cites_a_document_outside_the_repository():
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("eagle_probe", "tests", "benchmarks", "analyses")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "test_sources.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "BRIEF" in line or "STYLE.md" in line
    ]
    assert not cited, cited


def _module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")  # __version__ and the like pass


def test_no_module_reaches_for_another_modules_private_names():
    """A name with a leading underscore belongs to its module: what another module of the package
    uses (`from eagle_probe.x import _y`, or `x._y` on an imported module) is public there."""
    import ast

    found = []
    for path in sorted((ROOT / "eagle_probe").rglob("*.py")):
        here = _module_name(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {}  # local name -> the eagle_probe module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("eagle_probe") and alias.asname:
                        modules[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                if not source.startswith("eagle_probe") or source == here:
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{here}:{node.lineno} imports {source}.{alias.name}")
                    elif _is_module(f"{source}.{alias.name}"):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and modules.get(node.value.id, here) != here
            ):
                found.append(f"{here}:{node.lineno} uses {modules[node.value.id]}.{node.attr}")
    assert not found, found
