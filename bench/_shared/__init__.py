"""What several bench scripts share: where results go, peak FLOP/s and model FLOPs, the SFT
benchmark data, TRL's `SFTTrainer` as a throughput peer, and the two GRPO sides (Tempering and
TRL's `GRPOTrainer`, set up alike).

A script in bench/<kind>/ reaches it with
`sys.path.insert(0, str(Path(__file__).resolve().parents[1]))`, then `from _shared.paths import ...`.
"""
