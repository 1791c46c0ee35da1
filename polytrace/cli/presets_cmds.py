"""``polytrace presets [gpus|models]``: the GPU and model presets every ``--gpu`` / ``--model``
accepts, each with its figures and where they come from (a datasheet, a model's config.json)."""

from __future__ import annotations

# Sources are sentences (a datasheet with its figures); past this width they wrap in the table.
SOURCE_WIDTH = 64


def register(sub) -> None:
    p = sub.add_parser("presets", help="list the GPU and model presets (--gpu, --model) with their sources")
    p.add_argument("which", nargs="?", choices=("gpus", "models"), default=None,
                   help="only the GPU presets or only the model presets (default: both)")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    p.set_defaults(func=cmd_presets)


def gpu_rows() -> list[dict]:
    from ..run.hardware import _ALIASES, GPUS

    aliases: dict[str, list[str]] = {}
    for alias, slug in _ALIASES.items():
        aliases.setdefault(slug, []).append(alias)
    return [{"name": g.slug, "device": g.name, "bf16_tflops": g.bf16_tflops, "hbm_tbps": g.hbm_tbps,
             "memory_gb": g.memory_gb, "aliases": sorted(aliases.get(g.slug, [])), "source": g.source}
            for g in GPUS.values()]


def model_rows() -> list[dict]:
    from ..run.models import get_model, list_models

    rows = []
    for name in list_models():
        m = get_model(name)
        rows.append({"name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                     "kv_heads": m.kv_heads, "experts": m.experts, "active_experts": m.active_experts,
                     "aliases": list(m.aliases), "source": f"config.json of {m.source}" if "/" in m.source
                     and " " not in m.source else m.source})
    return rows


def cmd_presets(args) -> int:
    show = ("gpus", "models") if args.which is None else (args.which,)
    data = {k: (gpu_rows() if k == "gpus" else model_rows()) for k in show}
    if args.json:
        from ._io import print_json

        print_json(data)
        return 0
    from tabulate import tabulate

    blocks = []
    if "gpus" in data:
        rows = [[g["name"], g["bf16_tflops"], g["hbm_tbps"], g["memory_gb"], ", ".join(g["aliases"]), g["source"]]
                for g in data["gpus"]]
        blocks.append(f"GPU presets ({len(rows)}; --gpu NAME or an alias)\n" + tabulate(
            rows, headers=["name", "bf16 TF/s", "HBM TB/s", "GB", "aliases", "source"],
            maxcolwidths=[None, None, None, None, 24, SOURCE_WIDTH]))
    if "models" in data:
        rows = [[m["name"], m["layers"], m["hidden"], f"{m['heads']}/{m['kv_heads']}",
                 f"{m['active_experts']} of {m['experts']}" if m["experts"] else "dense", ", ".join(m["aliases"]),
                 m["source"]] for m in data["models"]]
        blocks.append(f"model presets ({len(rows)}; --model NAME, an alias, or a Hugging Face config.json)\n"
                      + tabulate(rows, headers=["name", "layers", "hidden", "heads/kv", "experts", "aliases", "source"],
                                 maxcolwidths=[None, None, None, None, None, 24, SOURCE_WIDTH]))
    print("\n\n".join(blocks))
    return 0
