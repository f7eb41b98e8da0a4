"""vLLM's KV connector base, as kvwire's tests need it (see
../../../../../README.md): the role, the scheduler-to-worker metadata and
its binding, and get_block_ids_with_load_errors's default."""
import enum


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    pass


class KVConnectorBase_V1:
    def __init__(self, vllm_config, role, kv_cache_config=None):
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._role = role

    @property
    def role(self):
        return self._role

    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def _get_connector_metadata(self):
        assert self._connector_metadata is not None
        return self._connector_metadata

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        return set()
