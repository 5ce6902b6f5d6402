"""An EKS test bed: moto's server, with sim clusters as the data plane and EKS token authentication."""

from tests.emulators.eks.emulator import ACCESS_KEY_ID, SECRET_ACCESS_KEY, EksEmulator

__all__ = ["ACCESS_KEY_ID", "SECRET_ACCESS_KEY", "EksEmulator"]
