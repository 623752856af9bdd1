"""fedctl's commands, one module per group; importing one registers its commands on `federation.cli.app.cli`."""
