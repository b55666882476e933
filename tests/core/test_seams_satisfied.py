"""The typed seams that broke the package's two import circles are satisfied by the classes they stand
for: every member a Protocol names exists on the real class (a method or property of the class, or an
attribute its ``__init__`` sets), with the same parameters. The lower module no longer imports the higher
one, so without this check a renamed launcher attribute or Forge property would surface only in a run.

- :class:`openforge.runner.heldout_eval.HeldoutHost` ← :class:`openforge.runner.forge.Forge`
- :class:`openforge.launchers.k8s_sandbox.PodHost` ← :class:`openforge.launchers.kubernetes.KubernetesLauncher`
- :class:`openforge.launchers._k8s_verify.VerifyingPod` ← :class:`openforge.launchers.k8s_sandbox.KubernetesSandbox`
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from openforge.launchers._k8s_verify import VerifyingPod
from openforge.launchers.k8s_sandbox import KubernetesSandbox, PodHost
from openforge.launchers.kubernetes import KubernetesLauncher
from openforge.runner.forge import Forge
from openforge.runner.heldout_eval import HeldoutHost

SEAMS = [(HeldoutHost, Forge), (PodHost, KubernetesLauncher), (VerifyingPod, KubernetesSandbox)]


def protocol_members(proto: type) -> dict[str, object]:
    """name -> the Protocol's declaration (a function, a property, or None for a plain annotation)."""
    out: dict[str, object] = {name: None for name in inspect.get_annotations(proto)}
    for name, value in proto.__dict__.items():
        if (isinstance(value, property) or inspect.isfunction(value)) and not (name.startswith("__") and name.endswith("__")):
            out[name] = value
    return out


def init_attributes(cls: type) -> set[str]:
    """The ``self.x`` names ``cls.__init__`` assigns (``a.b = ...``, ``self.a, self.b = ...``, ``self.a: T = ...``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    names: set[str] = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    names.add(e.attr)
    return names


@pytest.mark.parametrize(("proto", "cls"), SEAMS, ids=lambda x: x.__name__)
def test_the_class_has_every_member_of_its_seam(proto, cls):
    attrs = init_attributes(cls)
    missing, differ = [], []
    for name, decl in protocol_members(proto).items():
        real = inspect.getattr_static(cls, name, None)
        if real is None and name not in attrs:
            missing.append(name)
        elif inspect.isfunction(decl):
            if not inspect.isfunction(real):
                differ.append(f"{name}: a method in the seam, not in {cls.__name__}")
            elif list(inspect.signature(decl).parameters) != list(inspect.signature(real).parameters):
                differ.append(f"{name}: {inspect.signature(decl)} vs {inspect.signature(real)}")
            elif inspect.iscoroutinefunction(decl) != inspect.iscoroutinefunction(real):
                differ.append(f"{name}: async in one, not the other")
    assert not missing and not differ, f"{cls.__name__} does not satisfy {proto.__name__}: missing {missing}; {differ}"


def test_the_check_sees_a_missing_member():
    class Host:
        def __init__(self):
            self.namespace = "x"

    assert "namespace" in init_attributes(Host)
    with pytest.raises(AssertionError, match="missing"):
        test_the_class_has_every_member_of_its_seam(PodHost, Host)
