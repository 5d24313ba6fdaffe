from remat_theory.cli.main import entry

entry()
