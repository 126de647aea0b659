"""`temper run`: pipelines of stages with gates -- the plan (validation), the stage table and the runner."""
