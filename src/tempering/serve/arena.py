"""The blind arena: two releases answer one prompt, a person votes, then sees who was who.

    POST /arena/battles              {"prompt"?} -> {"id", "prompt", "a", "b"}
    POST /arena/battles/{id}/votes   {"choice": a|b|tie|both_bad} -> {"reveal": {"a", "b"}}
    GET  /arena/ranking              Bradley–Terry ratings with bootstrap CIs, annotator agreement
                                     (per annotator: the calling key's own row only)
    GET  /arena                      the page (serve/arena_page.py)

The annotator is the calling key: one vote per key per battle, under the key's name (a
client cannot invent annotators to outvote others). A typed prompt makes a battle only its
key sees and judges (a private prompt never reaches another key). A battle without a typed
prompt first reuses a shared battle (one drawn from `arena_prompts`) this key has not voted
on yet, so several keys judge the same answers and their agreement can be measured, else
draws a new one. The two contestants are two different releases drawn at random, and which
one is "A" is random too; the battle's models are never sent before the key's vote.
A battle's image (a typed one, or an arena prompt's) is checked in the worker thread that
answers it, once its two releases are drawn: both must take images, then it is held to the
server's image limits and decoded (`serve/vision.py`), all before either model runs.
`arena_pairs` turns votes into preference pairs with `votes` for the agreement filter and
DPO (`temper arena export`).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

from tempering.errors import UserError
from tempering.serve import chat
from tempering.serve.arena_page import PAGE
from tempering.serve.protocol import ApiError, BattleRequest, ChatCompletionRequest, VoteRequest
from tempering.serve.ranking import OUTCOME, ranking
from tempering.serve.vision import ImageLimits, check_images, takes_images

__all__ = ["PAGE", "add_routes", "arena_pairs", "arena_ranking", "load_prompts"]
VOTES_PER_BATTLE = 3
PREFERS = {"a": "chosen", "b": "rejected", "tie": "tie", "both_bad": "tie"}


def load_prompts(path: Path | None) -> list[tuple[str, str | None]]:
    """Arena prompts as (text, image data URL or None): JSONL rows with a `prompt` string and an
    optional `image` (a data URL or an image file, relative to the prompts file), or one prompt per
    line of plain text."""
    if path is None:
        return []
    prompts: list[tuple[str, str | None]] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        image = None
        if line.startswith("{"):
            row = json.loads(line)
            if not isinstance(row.get("prompt"), str):
                raise UserError(f"{path}:{n}: an arena prompt row needs a 'prompt' string: {line[:80]}")
            line, image = row["prompt"], _image(row.get("image"), Path(path), n)
        prompts.append((line, image))
    return prompts


def _image(value: Any, path: Path, n: int) -> str | None:
    """An arena prompt's image as a data URL (checked once at load)."""
    from tempering.data.formats import RowInvalid
    from tempering.data.images import data_url, load_image

    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise RowInvalid("'image' must be a data URL or a file path")
        return data_url(load_image(value, path.parent))
    except RowInvalid as exc:
        raise UserError(f"{path}:{n}: {exc}") from None


def check_battle_image(url: str, contestants: list[Any], limits: ImageLimits) -> None:
    """A battle's image, checked after its two models are known: both must take images (the
    check names neither, the battle is blind), then it is decoded (`serve/vision.py`)."""
    if not all(takes_images(served) for served in contestants):
        raise ApiError(
            400,
            "a release this battle drew is text-only: the arena cannot show it a picture",
            "invalid_value",
            "image",
        )
    check_images([("image", url)], limits, "image")


def arena_ranking(votes: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """The ranking and annotator agreement of stored votes (rows of `Store.votes`)."""
    from tempering.data.agreement import agreement_report

    triples = [(v["model_a"], v["model_b"], OUTCOME[v["choice"]]) for v in votes]
    per_battle: dict[str, list[dict[str, str]]] = defaultdict(list)
    for v in votes:
        per_battle[v["battle_id"]].append({"annotator": v["annotator"], "prefers": PREFERS[v["choice"]]})
    report = agreement_report(list(per_battle.values()))
    per_annotator = {
        name: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for name, row in report.annotators.items()
    }  # NaN (nothing to agree with) is not JSON
    return {
        "ranking": ranking(triples, seed=seed),
        "votes": len(votes),
        "battles": len(per_battle),
        "agreement": {**report.summary(), "per_annotator": per_annotator},
    }


def arena_pairs(votes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Preference pairs from votes: one per battle whose A/B votes have a majority.

    Returns (pairs, battles skipped: only ties / both bad, or as many A as B votes).
    """
    battles: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for v in votes:
        battles[v["battle_id"]].append(v)
    pairs, skipped = [], 0
    for bid, vs in battles.items():
        counts = Counter(v["choice"] for v in vs)
        if counts["a"] == counts["b"]:
            skipped += 1
            continue
        first = vs[0]
        a_wins = counts["a"] > counts["b"]
        sides = ("a", "b") if a_wins else ("b", "a")
        flip = {
            "a": "chosen" if a_wins else "rejected",
            "b": "rejected" if a_wins else "chosen",
            "tie": "tie",
            "both_bad": "tie",
        }
        pairs.append(
            {
                "prompt": first["prompt"],
                "chosen": first[f"answer_{sides[0]}"],
                "rejected": first[f"answer_{sides[1]}"],
                "source": "arena",
                "votes": [{"annotator": v["annotator"], "prefers": flip[v["choice"]]} for v in vs],
                "meta": {
                    "battle_id": bid,
                    "chosen_model": first[f"model_{sides[0]}"],
                    "rejected_model": first[f"model_{sides[1]}"],
                    "both_bad": counts["both_bad"],
                },
            }
        )
    return pairs, skipped


def add_routes(
    app: Any, cfg: Any, models: Any, store: Any, authorized: Callable, route_for: Callable, images: ImageLimits
) -> None:
    """The arena's JSON routes on `app` (auth and model routing from the server, its image limits)."""
    from fastapi import Depends
    from fastapi.concurrency import run_in_threadpool

    prompts, rng = load_prompts(cfg.arena_prompts), random.Random(cfg.seed)

    def answer(name: str, prompt: str, image: str | None) -> tuple[str, int]:
        route, served = route_for(name)
        content: Any = prompt
        if image is not None:
            content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": prompt}]
        req = ChatCompletionRequest.model_validate(  # the messages validate as a client's would
            {
                "model": name,
                "messages": [{"role": "user", "content": content}],
                "temperature": cfg.arena_temperature,
                "max_tokens": cfg.arena_max_tokens,
            }
        )
        prepared = chat.prepare_chat(served, req, cfg.arena_max_tokens, images)
        completion = chat.generate(served, prepared, cfg.request_timeout_s)[0][0]
        return completion.text.strip(), len(completion.token_ids)

    def new_battle(key: Any, prompt: str, shared: bool, image: str | None) -> dict[str, Any]:
        contestants = models.release_routes()
        if len(contestants) < 2:
            raise ApiError(409, "the arena needs at least two releases in the registry", "arena_unavailable")
        first, second = rng.sample(contestants, 2)
        if image is not None:
            check_battle_image(image, [route_for(c.name)[1] for c in (first, second)], images)
        (text_a, tokens_a), (text_b, tokens_b) = answer(first.name, prompt, image), answer(second.name, prompt, image)
        bid = store.add_battle(key.id, prompt, (first.name, second.name), (text_a, text_b), shared, image)
        store.audit(key.id, "/arena/battles", 200, completion_tokens=tokens_a + tokens_b, response_id=bid)
        return store.battle(bid, key.id)

    @app.post("/arena/battles")
    async def battle(req: BattleRequest, key: Any = Depends(authorized)):
        if req.image is not None and req.prompt is None:
            raise ApiError(400, "an image needs a typed prompt about it", "invalid_value", "image")
        row = None if req.prompt else store.open_battle(key.id, VOTES_PER_BATTLE)
        if row is None:
            drawn = (req.prompt, req.image) if req.prompt else None
            drawn = drawn or (rng.choice(prompts) if prompts else None)
            if drawn is None:
                raise ApiError(
                    400, "no arena prompts configured (--arena-prompts): type a prompt", "invalid_value", "prompt"
                )
            row = await run_in_threadpool(new_battle, key, drawn[0], req.prompt is None, drawn[1])
        return {
            "id": row["id"],
            "prompt": row["prompt"],
            "image": row.get("image"),
            "a": row["answer_a"],
            "b": row["answer_b"],
        }

    @app.post("/arena/battles/{battle_id}/votes")
    async def vote(battle_id: str, req: VoteRequest, key: Any = Depends(authorized)):
        row = store.battle(battle_id, key.id)
        if row is None:  # another key's private battle is as absent as a made-up id
            raise ApiError(404, f"no battle {battle_id!r}", "not_found")
        store.add_vote(key, battle_id, req.choice)
        return {"battle_id": battle_id, "choice": req.choice, "reveal": {"a": row["model_a"], "b": row["model_b"]}}

    @app.get("/arena/ranking")
    async def arena_rank(key: Any = Depends(authorized)):
        report = await run_in_threadpool(arena_ranking, store.votes(), cfg.seed)
        agreement = report["agreement"]  # annotators are keys: a key sees its own row, not the others' names
        agreement["per_annotator"] = {k: v for k, v in agreement["per_annotator"].items() if k == key.name}
        return report
