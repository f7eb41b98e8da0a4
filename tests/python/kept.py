"""kept.py - Kept, a dict of a worker connector's rooms (connector.rooms)
that remembers each room it ever held, for the probes that must read the
outcome of a room the connector dropped in the step that began it."""


class Kept(dict):
    def __init__(self):
        super().__init__()
        self.ever = {}  # req id -> the room object (KVSender/KVReceiver)

    def __setitem__(self, k, v):
        self.ever[k] = v[0]
        super().__setitem__(k, v)
