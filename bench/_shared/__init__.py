"""What several bench scripts share: where results go, peak FLOP/s and model FLOPs, the SFT
benchmark data, TRL's `SFTTrainer` as a throughput peer, and the two GRPO sides (Tempering and
TRL's `GRPOTrainer`, set up alike), and `product.run_recipe`: a training run through the recipe
its `temper` command runs, with the bench's step clock as a Trainer callback.

A script in bench/<kind>/ reaches it with
`sys.path.insert(0, str(Path(__file__).resolve().parents[1]))`, then `from _shared.paths import ...`.
"""
