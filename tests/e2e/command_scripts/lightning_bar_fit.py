"""Lightning's own demo models fitted by Lightning's ``Trainer`` with what Lightning prints and
writes by itself, for fttui to read without its callback (``FTTUI_INJECT=0``, issue 42): its
progress bar and its TensorBoard files. Nothing of fttui in it.

Environment: ``MODEL`` ``boring`` (``BoringModel``: a validation loop, nothing logged) or ``lstm``
(``LightningLSTM`` on ``data/wikitext-2.txt`` of the folder it runs in: logs ``train_loss`` with
``prog_bar=True``); ``BAR`` ``tqdm`` (Lightning's ``TQDMProgressBar``) or ``default`` (Lightning's
choice: ``RichProgressBar`` where ``rich`` is installed); ``TB=1``: Lightning's
``TensorBoardLogger`` under ``tb/``; ``STEPS`` (``max_steps``), ``BATCHES`` (``limit_train_batches``:
several epochs). The script records what its own Trainer saw in ``STATE_FILE``."""
import json
import os

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger


class Record(L.Callback):
    def __init__(self):
        self.logged, self.samples = [], 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = trainer.callback_metrics.get("train_loss")
        self.logged.append(None if loss is None else float(loss))


model_name = os.environ.get("MODEL", "boring")
if model_name == "lstm":
    from lightning.pytorch.demos import LightningLSTM

    model = LightningLSTM(vocab_size=int(os.environ.get("VOCAB", "200")))
else:
    from lightning.pytorch.demos.boring_classes import BoringModel

    model = BoringModel()
record = Record()
callbacks = [record] + ([TQDMProgressBar()] if os.environ.get("BAR", "tqdm") == "tqdm" else [])
logger = TensorBoardLogger("tb") if os.environ.get("TB") == "1" else False
trainer = L.Trainer(max_steps=int(os.environ.get("STEPS", "25")), limit_train_batches=int(os.environ.get("BATCHES", "10")),
                    limit_val_batches=2, accelerator="cpu", devices=1, logger=logger, log_every_n_steps=1,
                    enable_checkpointing=False, enable_model_summary=False, callbacks=callbacks)
trainer.fit(model)
with open(os.environ["STATE_FILE"], "w") as f:
    json.dump({"global_step": trainer.global_step, "logged": record.logged, "epochs": trainer.current_epoch,
               "bar": type(trainer.progress_bar_callback).__name__,
               "callbacks": [type(c).__name__ for c in trainer.callbacks]}, f)
