"""9. A fleet: devices that train their sparse updates locally and an aggregator that averages
each element over the devices that trained it (Flower drives the rounds).

Modules: tensors (what a build trains, element by element), aggregate (the server's float
master and the per-element average), partition (IID and label-skewed splits for
simulations), local (one device's round over the link, without Flower). With Flower
installed (`pip install tinytrain-mcu[fleet]`): records (rounds as Flower records),
client_app (the ClientApp around one device), strategy (SparseFedAvg), server_app (the
ServerApp); simulate (the Flower app that names them, and `flwr run` of a simulated fleet
isolated in its own FLWR_HOME; `tinytrain fleet simulate` / `fleet app`).
"""
