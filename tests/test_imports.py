"""The library's shape: every public name of the design (shared/DESIGN.md, a contract) imports, and
the import graph of attn_core has no cycle."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "attn_core"

#: the public API of shared/DESIGN.md: module -> names (checks outside this repository call them)
DESIGN = {
    "attn_core.attention": ["softmax", "scaled_dot_product_attention", "causal_mask", "sliding_window_mask",
                            "RotaryPositionalEmbedding", "MultiHeadSelfAttention", "GroupedQueryAttention",
                            "flash_attention"],
    "attn_core.linear": ["causal_linear_attention_parallel", "causal_linear_attention_recurrent",
                         "causal_linear_attention_chunked", "gated_linear_attention_parallel",
                         "gated_linear_attention_recurrent", "gated_linear_attention_chunked",
                         "linear_attention_step", "delta_rule_recurrent", "delta_rule_chunked",
                         "gated_delta_rule_recurrent", "gated_delta_rule_chunked", "delta_rule_parallel",
                         "gated_delta_rule_parallel"],
    "attn_core.kv_cache": ["kv_cache_bytes_per_token", "kv_cache_bytes", "linear_state_bytes", "MODELS",
                           "ModelConfig"],
    "attn_core.ledger": ["DTYPE_BYTES", "activation_ledger", "memory_crossover", "block_ledger"],
    "attn_core.flops": ["layer_flops", "flops_crossover"],
    "attn_core.measure": ["saved_tensor_bytes", "count_flops", "time_fn"],
    "attn_core.widgets": ["MemoryLedgerWidget", "FlopsWidget", "Explorer", "FitWidget", "AnswerBox"],
    "attn_core.parallel": ["ring_attention", "ulysses_attention"],
}


@pytest.mark.parametrize("module", list(DESIGN))
def test_design_names_import(module):
    mod = importlib.import_module(module)
    missing = [name for name in DESIGN[module] if not hasattr(mod, name)]
    assert not missing, f"{module} lacks {missing}"
    assert hasattr(importlib.import_module("attn_core.kv_cache").ModelConfig, "num_params")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the attn_core modules it imports (a package's own __init__ only when named alone)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = node.module
                if node.level:  # relative: from the package, up level - 1 packages
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                found = subs if len(subs) == len(node.names) else [target, *subs]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {m for m in found if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, ignoring a module's import of a package that contains it, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):
                continue  # a submodule reading its own package (already being imported)
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path + [nxt])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_attn_core_has_no_import_cycle():
    assert find_cycle(import_graph()) is None
