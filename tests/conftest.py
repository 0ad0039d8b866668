import os

# verl's groupwise helpers pick devices from this; our tests are CPU-only.
os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")
