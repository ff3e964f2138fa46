"""A generated Speckle model built from real specklepy objects, shared by the tests and
the benchmark: lines, meshes (with detached, chunked vertex and face lists), walls that
share detached levels and carry detached display meshes, and nested groups of points."""

from __future__ import annotations

import random

from specklepy.objects.base import Base
from specklepy.objects.geometry import Line, Mesh, Point


def base(speckle_type: str | None = None, **props) -> Base:
    """A Base with dynamic members (Base takes none as constructor arguments)."""
    obj = Base()
    if speckle_type:
        obj.speckle_type = speckle_type
    for name, value in props.items():
        obj[name] = value
    return obj


def _point(rng: random.Random) -> Point:
    return Point(x=rng.uniform(-5e3, 5e3), y=rng.uniform(-5e3, 5e3), z=rng.choice([0.0, 3e3]), units="mm")


def _mesh(rng: random.Random, quads: int) -> Mesh:
    vertices = [round(rng.uniform(-5e3, 5e3), 3) for _ in range(12 * quads)]
    faces = []
    for q in range(quads):
        faces += [4, 4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3]
    return Mesh(vertices=vertices, faces=faces, units="mm")


def build_model(elements: int, seed: int = 7) -> Base:
    """A model whose send writes several objects per element (about 2.25 on average)."""
    rng = random.Random(seed)
    levels = []
    for i in range(8):
        level = base(name=f"Level {i}", elevation=3000.0 * i)
        level.applicationId = f"level-{i}"
        levels.append(level)
    root = base(name=f"generated model {seed}")
    root["@elements"] = []
    for i in range(elements):
        kind = i % 4
        if kind == 0:
            obj = Line(start=_point(rng), end=_point(rng), units="mm")
        elif kind == 1:
            obj = _mesh(rng, quads=rng.randint(1, 6))
        elif kind == 2:
            obj = base(
                "Objects.BuiltElements.Wall",
                family="Basic Wall",
                type=f"Generic - {rng.choice([100, 200, 300])}mm",
                height=rng.uniform(2500, 4000),
            )
            obj["@level"] = levels[i % len(levels)]
            obj["@displayValue"] = [_mesh(rng, quads=rng.randint(2, 8))]
            obj["baseLine"] = Line(start=_point(rng), end=_point(rng), units="mm")
        else:
            obj = base(name=f"group {i}", tags=[f"t{rng.randint(0, 50)}" for _ in range(3)])
            obj["@points"] = [_point(rng) for _ in range(rng.randint(1, 3))]
        obj.applicationId = f"element-{seed}-{i}"
        root["@elements"].append(obj)
    return root
