"""The dependency lists agree: requirements.txt, pyproject.toml and environment.yml name the same versions, and
constraints-lowest.txt (CI's second environment, `.ci/run`) pins each one to the lowest version they allow."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def read_requirements(path: Path) -> dict[str, Requirement]:
    """The requirements of a pip requirements or constraints file, by canonical name."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return by_name(line for line in lines if line)


def by_name(lines) -> dict[str, Requirement]:
    requirements = [Requirement(line) for line in lines]
    names = [canonicalize_name(r.name) for r in requirements]
    assert len(set(names)) == len(names), f"a package is listed twice: {sorted(names)}"
    return dict(zip(names, requirements, strict=True))


def lower_bound(requirement: Requirement) -> Version:
    """The one version `requirement` cannot go below, which its `>=` or `==` names."""
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    assert len(bounds) == 1, f"{requirement}: needs exactly one `>=` or `==` bound, so it has a lowest version"
    return bounds[0]


def test_constraints_pin_each_requirement_to_its_lower_bound():
    requirements = read_requirements(ROOT / "requirements.txt")
    constraints = read_requirements(ROOT / "constraints-lowest.txt")
    assert constraints.keys() == requirements.keys()
    for name, requirement in requirements.items():
        (pin,) = constraints[name].specifier
        assert pin.operator == "==" and Version(pin.version) == lower_bound(requirement), (
            f"constraints-lowest.txt has {constraints[name]}, requirements.txt {requirement}"
        )


def test_pyproject_and_environment_list_the_requirements():
    requirements = {name: str(r) for name, r in read_requirements(ROOT / "requirements.txt").items()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [line for group in project["optional-dependencies"].values() for line in group]
    assert {name: str(r) for name, r in by_name(project["dependencies"] + extras).items()} == requirements
    (pip,) = (
        d["pip"] for d in yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"] if isinstance(d, dict)
    )
    assert {name: str(r) for name, r in by_name(line for line in pip if line != "-e .").items()} == requirements
