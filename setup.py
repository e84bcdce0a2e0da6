"""Maps widgets/ and examples/ into the maze_lab namespace; everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

ROOTS = {"maze_lab": "maze_lab", "maze_lab.widgets": "widgets", "maze_lab.examples": "examples"}

# Namespace discovery also lists the data-only config folders (conf/env, conf/model, ...) as packages, so
# that their YAML files ship as package data without setuptools' "package would be ignored" warning.
packages, package_dir = [], {}
for name, folder in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    for sub in find_namespace_packages(where=folder, exclude=["*__pycache__*"]):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
packages = sorted(set(packages))

setup(packages=packages, package_dir=package_dir)
