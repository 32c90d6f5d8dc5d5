"""What the experiments share, written once: the data folder and its messages (`datafolder`),
the data sets several experiments read (`data`, `synthetic`), test metrics (`metrics`),
fitting helpers (`fitting`), progress and threads (`progress`), results sections
(`sections`), the command line (`command`), tables and figures. A module here imports no
experiment."""
