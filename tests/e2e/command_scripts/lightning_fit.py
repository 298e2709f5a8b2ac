"""Lightning's own demo model (``BoringModel``) fitted by Lightning's ``Trainer``, nothing of fttui
in it (issue 42): fttui's callback comes from the automatic hook. The script records what its own
Trainer saw (its global step, each training step's loss, the samples, its callbacks) in
``STATE_FILE.RANK``; ``DEVICES=2`` fits with DDP on two CPU processes; ``PACKAGE=pytorch_lightning``
fits with the older package name's Trainer."""
import json
import os

if os.environ.get("PACKAGE") == "pytorch_lightning":
    import pytorch_lightning as L
    from pytorch_lightning.demos.boring_classes import BoringModel
else:
    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel


class Record(L.Callback):
    def __init__(self):
        self.losses, self.samples = [], 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        self.samples += len(batch)


steps = int(os.environ.get("STEPS", "50"))
devices = int(os.environ.get("DEVICES", "1"))
record = Record()
trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                    logger=False, enable_checkpointing=False, enable_model_summary=False, limit_val_batches=0,
                    callbacks=[record])
trainer.fit(BoringModel())
with open(f"{os.environ['STATE_FILE']}.{trainer.global_rank}", "w") as f:
    json.dump({"global_step": trainer.global_step, "losses": record.losses, "samples": record.samples,
               "world_size": trainer.world_size, "callbacks": [type(c).__name__ for c in trainer.callbacks]}, f)
