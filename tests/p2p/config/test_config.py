"""Config loading: defaults, every error naming its key, overrides, examples, writing."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from p2p.config import (
    ConfigError,
    HostPort,
    NodeConfig,
    SwarmKeyError,
    encode_swarm_key,
    generate_swarm_key,
    load_config,
    load_swarm_key,
    parse_config_text,
    parse_host_port,
    parse_permutation,
    render_config_toml,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_empty_file_gives_documented_defaults() -> None:
    config = parse_config_text("")
    assert config.node.listen == HostPort("127.0.0.1", 0)
    assert config.node.bootstrap == ()
    assert config.network.layers == (64, 48, 32, 10)
    assert config.models == ()
    assert config.peer_sampling.view_size == 20
    assert config.peer_sampling.shuffle_length == 5
    assert config.training.round_interval == 0.0
    assert config.training.rounds == 0
    assert config.gossip.privacy == "none"
    assert config.security.swarm_key_file is None


def test_full_document_is_parsed() -> None:
    config = parse_config_text(
        """
        [node]
        name = "n1"
        listen = "[::1]:7400"
        bootstrap = ["10.0.0.5:7400", "example.org:7401"]
        seed = 7
        log_format = "json"
        [network]
        layers = "64=48=32=10"
        activation = "tanh"
        cross_models = true
        [[models]]
        name = "global"
        neurons = "64-40-24-10"
        [[models]]
        name = "group"
        neurons = "0-8-8-0"
        depends_on = ["global"]
        kind = "semi-local"
        [training]
        lr = 1
        optimizer = "adam"
        [data]
        permutation = "8:9,6:7"
        [limits]
        max_messages_per_second = 10
        """,
        base_dir=Path("/cfg"),
    )
    assert config.node.listen == HostPort("::1", 7400)
    assert str(config.node.listen) == "[::1]:7400"
    assert config.node.bootstrap == (HostPort("10.0.0.5", 7400), HostPort("example.org", 7401))
    assert config.network.cross_models is True
    assert [m.name for m in config.models] == ["global", "group"]
    assert config.models[1].depends_on == ("global",)
    assert config.models[1].counts == (0, 8, 8, 0)
    assert config.model("group").kind == "semi-local"
    assert isinstance(config.training.lr, float) and config.training.lr == 1.0
    assert config.data.permutation == ((8, 9), (6, 7))
    assert config.data.label_map(10) == (0, 1, 2, 3, 4, 5, 7, 6, 9, 8)


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("[training]\nlr = -0.1", "training.lr", "> 0"),
        ("[training]\nlr = 'fast'", "training.lr", "expected a number"),
        ("[training]\nlr = nan", "training.lr", "finite"),
        ("[training]\nbatch_size = 0", "training.batch_size", ">= 1"),
        ("[training]\nbatch_size = 3.5", "training.batch_size", "integer"),
        ("[training]\nbatch_size = true", "training.batch_size", "integer"),
        ("[training]\noptimizer = 'adamw'", "training.optimizer", "did you mean 'adam'"),
        ("[training]\nmomentum = 1.0", "training.momentum", "< 1"),
        ("[training]\nrounds = -1", "training.rounds", ">= 0"),
        ("[training]\neval_every = 0", "training.eval_every", ">= 1"),
        ("[training]\nround_interval = -1", "training.round_interval", ">= 0"),
        ("[training]\nlearning_rate = 0.1", "training.learning_rate", "unknown key"),
        ("[node]\nlisten = '127.0.0.1'", "node.listen", "host:port"),
        ("[node]\nlisten = '127.0.0.1:70000'", "node.listen", "0..65535"),
        ("[node]\nlisten = ':7400'", "node.listen", "host"),
        ("[node]\nlisten = '[::1:7400'", "node.listen", "host:port"),
        ("[node]\nlisten = 7400", "node.listen", "string"),
        ("[node]\nbootstrap = '1.2.3.4:5'", "node.bootstrap", "list"),
        ("[node]\nbootstrap = ['1.2.3.4:5', 'x:0']", "node.bootstrap[1]", "1..65535"),
        ("[node]\nlog_format = 'xml'", "node.log_format", '"text" | "json"'),
        ("[node]\nname = ''", "node.name", "non-empty"),
        ("[node]\nseed = -3", "node.seed", ">= 0"),
        ("[node]\ndata_dir = 5", "node.data_dir", "string"),
        ("[network]\nlayers = '64-48-10'", "network.layers", '"="'),
        ("[network]\nlayers = '64'", "network.layers", "at least 2"),
        ("[network]\nlayers = '64=0=10'", "network.layers", ">= 1"),
        ("[network]\nactivation = 'gelu'", "network.activation", '"relu"'),
        ("[network]\ncross_models = 'yes'", "network.cross_models", "true or false"),
        ("[[models]]\nneurons = '64-40-24-10'", "models[0].name", "missing"),
        ("[[models]]\nname = 'g'", "models[0].neurons", "missing"),
        ("[[models]]\nname = 'g'\nneurons = '64-40-10'", "models[0].neurons", "one count"),
        ("[[models]]\nname = 'g'\nneurons = '64-49-24-10'", "models[0].neurons", "<= 48"),
        ("[[models]]\nname = 'g'\nneurons = '64-a-24-10'", "models[0].neurons", "cannot parse"),
        ("[[models]]\nname = 'g'\nneurons = '64-0-0-0'", "models[0].neurons", "no parameters"),
        ("[[models]]\nname = 'local'\nneurons = '0-1-0-0'", "models[0].name", "reserved"),
        ("[[models]]\nname = 'a b'\nneurons = '0-1-0-0'", "models[0].name", "valid model name"),
        ("[[models]]\nname = 'g'\nneurons = '0-1-0-0'\nkind = 'world'", "models[0].kind",
         '"global"'),
        ("[[models]]\nname = 'g'\nneurons = '0-1-0-0'\ndepends_on = 'x'",
         "models[0].depends_on", "list of strings"),
        ("[[models]]\nname = 'g'\nneurons = '0-1-0-0'\ndepends_on = ['globl']\n"
         "[[models]]\nname = 'global'\nneurons = '0-1-0-0'",
         "models[0].depends_on", "did you mean 'global'"),
        ("[[models]]\nname = 'g'\nneurons = '0-1-0-0'\ndepends_on = ['g']",
         "models[0].depends_on", "itself"),
        ("[[models]]\nname = 'a'\nneurons = '0-1-0-0'\ndepends_on = ['b']\n"
         "[[models]]\nname = 'b'\nneurons = '0-1-0-0'\ndepends_on = ['a']",
         "models[0].depends_on", "cycle a -> b -> a"),
        ("[[models]]\nname = 'a'\nneurons = '0-1-0-0'\n"
         "[[models]]\nname = 'a'\nneurons = '0-1-0-0'", "models[1].name", "duplicate"),
        ("[[models]]\nname = 'a'\nneurons = '0-40-0-0'\n"
         "[[models]]\nname = 'b'\nneurons = '0-9-0-0'", "models", "sum to <= 48"),
        ("[[models]]\nname = 'a'\nneurons = '0-1-0-0'\nshared = true", "models[0].shared",
         "unknown key"),
        ("models = 3", "models", "[[models]]"),
        ("[gossip]\nfanout = 0", "gossip.fanout", "between 1 and 64"),
        ("[gossip]\nprivacy = 'mask'", "gossip.privacy", "did you mean 'masked'"),
        ("[gossip]\nmask_partners = 0", "gossip.mask_partners", "between 1 and 16"),
        ("[gossip]\npush_timeout = 0", "gossip.push_timeout", "> 0"),
        ("[peer_sampling]\nview_size = 0", "peer_sampling.view_size", ">= 1"),
        ("[peer_sampling]\nview_size = 4\nshuffle_length = 5", "peer_sampling.shuffle_length",
         "view_size"),
        ("[peer_sampling]\nperiod = 0", "peer_sampling.period", "> 0"),
        ("[data]\ntask = 'mnist'", "data.task", '"digits"'),
        ("[data]\ntask = 'npz'", "data.path", "required"),
        ("[data]\nnum_nodes = 0", "data.num_nodes", ">= 1"),
        ("[data]\nnode_index = 4\nnum_nodes = 4", "data.node_index", "below"),
        ("[data]\npermutation = '8-9'", "data.permutation", "cannot parse"),
        ("[data]\npermutation = '8:9,9:7'", "data.permutation", "disjoint"),
        ("[data]\npermutation = '8:10'", "data.permutation", "does not exist"),
        ("[data]\ntest_fraction = 1.0", "data.test_fraction", "< 1"),
        ("[security]\ncipher = 'aes'", "security.cipher", '"aes-gcm"'),
        ("[limits]\nmax_connections = 0", "limits.max_connections", ">= 1"),
        ("[limits]\nmax_frame_size = 10", "limits.max_frame_size", "between 1024"),
        ("[limits]\nmax_messages_per_second = 0", "limits.max_messages_per_second", "> 0"),
        ("[limits]\nconnect_timeout = -1", "limits.connect_timeout", "> 0"),
        ("[limits]\nread_timeout = 'x'", "limits.read_timeout", "number"),
        ("[checkpoint]\ninterval = 0", "checkpoint.interval", "> 0"),
        ("[checkpoint]\nevery = 5", "checkpoint.every", "unknown key"),
        ("[trainig]\nlr = 0.1", "trainig", "did you mean 'training'"),
        ("cross_models = true", "cross_models", "belongs in [network]"),
        ("[training]\nfanout = 2", "training.fanout", "belongs in [gossip]"),
        ("training = 3", "training", "table"),
    ],
)
def test_every_error_names_its_key(text: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text)
    assert info.value.key == key
    message = str(info.value)
    assert message.startswith(key + ":") or f"{key}:" in message
    assert fragment in message


def test_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'batch_size'") as info:
        parse_config_text("[training]\nbatchsize = 10")
    assert info.value.key == "training.batchsize"


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[node\nname = 1")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML"):
        load_config(path)


def test_errors_from_a_file_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    path.write_text("[training]\nlr = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: training.lr:")
    assert info.value.key == "training.lr"


def test_missing_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"[node]\nname = '\xe9'\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(bad)


def test_relative_paths_resolve_against_the_config_directory(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "n.toml"
    path.write_text('[node]\ndata_dir = "state"\n[data]\ntask = "npz"\npath = "../d.npz"\n'
                    '[security]\nswarm_key_file = "/abs/swarm.key"\n')
    config = load_config(path)
    assert config.node.data_dir == tmp_path / "conf" / "state"
    assert config.data.path == tmp_path / "conf" / ".." / "d.npz"
    assert config.security.swarm_key_file == Path("/abs/swarm.key")
    assert config.source == path


def test_overrides_replace_file_values(tmp_path: Path) -> None:
    config = parse_config_text('[node]\nlisten = "127.0.0.1:7400"\nbootstrap = ["a:1"]\n')
    over = config.with_overrides(listen="0.0.0.0:9000", bootstrap="b:2, c:3",
                                 data_dir=tmp_path / "d", swarm_key_file="k.key",
                                 log_format="json", log_level="DEBUG")
    assert over.node.listen == HostPort("0.0.0.0", 9000)
    assert over.node.bootstrap == (HostPort("b", 2), HostPort("c", 3))
    assert over.node.data_dir == tmp_path / "d"
    assert over.security.swarm_key_file == Path.cwd() / "k.key"
    assert over.node.log_format == "json" and over.node.log_level == "debug"
    # the original is unchanged (frozen) and None keeps the file's value
    assert config.node.listen == HostPort("127.0.0.1", 7400)
    kept = config.with_overrides()
    assert kept == config
    assert config.with_overrides(bootstrap="").node.bootstrap == ()
    assert config.with_overrides(bootstrap=["x:5"]).node.bootstrap == (HostPort("x", 5),)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"listen": "nohost"}, "--listen (node.listen)"),
        ({"bootstrap": "a:1,b"}, "--bootstrap (node.bootstrap)"),
        ({"log_format": "yaml"}, "--log-format (node.log_format)"),
        ({"log_level": "loud"}, "--log-level (node.log_level)"),
    ],
)
def test_bad_overrides_name_the_option(kwargs: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig().with_overrides(**kwargs)
    assert info.value.key == key
    assert str(info.value).startswith(key)


def test_config_is_frozen() -> None:
    config = NodeConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.training.lr = 1.0  # type: ignore[misc]


def test_host_port_parsing() -> None:
    assert parse_host_port("localhost:1", "k") == HostPort("localhost", 1)
    assert parse_host_port("[fe80::1]:80", "k") == HostPort("fe80::1", 80)
    with pytest.raises(ConfigError, match="IPv6"):
        parse_host_port("[nothex]:80", "k")
    with pytest.raises(ConfigError, match="1..65535"):
        parse_host_port("h:0", "k")
    assert parse_host_port("h:0", "k", allow_port_zero=True).port == 0


def test_permutation_notation() -> None:
    assert parse_permutation("") == ()
    assert parse_permutation("7:8:9") == ((7, 8, 9),)
    config = parse_config_text('[data]\npermutation = "7:8:9"')
    assert config.data.label_map(10)[7:] == (8, 9, 7)
    assert config.data.permutation_text == "7:8:9"


@pytest.mark.parametrize("name", ["local", "full", "partial", "semi-local"])
def test_examples_load(name: str) -> None:
    config = load_config(EXAMPLES / f"{name}.toml")
    assert config.data.task == "digits"
    assert config.network.layers == (64, 48, 32, 10)
    shared = {m.name: m for m in config.models}
    if name == "local":
        assert shared == {}
    elif name == "full":
        assert shared["global"].counts == config.network.layers
    elif name == "partial":
        g = shared["global"].counts
        assert round(g[2] / config.network.layers[2], 1) == 0.8
        assert g[0] == 64 and g[-1] == 10
    else:
        assert shared["perm-8-9"].depends_on == ("global",)
        covered = [sum(m.counts[i] for m in config.models) for i in range(4)]
        assert tuple(covered) == config.network.layers


def test_examples_readme_mentions_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLES.glob("*.toml"):
        assert path.name in readme


@pytest.mark.parametrize("name", ["local", "full", "partial", "semi-local"])
def test_render_round_trips(name: str, tmp_path: Path) -> None:
    config = load_config(EXAMPLES / f"{name}.toml").with_overrides(
        data_dir=tmp_path / 'we"ird\\dir', bootstrap="[::1]:5,h:6")
    text = render_config_toml(config)
    out = tmp_path / "out.toml"
    out.write_text(text)
    assert load_config(out) == config


def test_swarm_key_round_trip_and_errors(tmp_path: Path) -> None:
    key = generate_swarm_key()
    assert len(key) == 32 and key != generate_swarm_key()
    path = tmp_path / "swarm.key"
    path.write_text(encode_swarm_key(key))
    path.chmod(0o600)  # a key others can read is refused (tests/test_local_hardening.py)
    assert load_swarm_key(path) == key
    with pytest.raises(SwarmKeyError, match="does not exist"):
        load_swarm_key(tmp_path / "none.key")
    path.write_text("not base64 !!!\n")
    with pytest.raises(SwarmKeyError, match="not valid base64"):
        load_swarm_key(path)
    path.write_text(base64.b64encode(key[:16]).decode() + "\n")
    with pytest.raises(SwarmKeyError, match="expected 32"):
        load_swarm_key(path)


def test_operations_doc_documents_every_key() -> None:
    from p2p.config import SECTION_KEYS

    doc = (EXAMPLES.parent / "docs" / "guide" / "configuration.md").read_text()
    for section, keys in SECTION_KEYS.items():
        for key in keys:
            dotted = f"models[i].{key}" if section == "models" else f"{section}.{key}"
            assert f"| `{dotted}` |" in doc, dotted


def test_advertise_address_parses_renders_and_is_checked(tmp_path: Path) -> None:
    config = parse_config_text('[node]\nlisten = "0.0.0.0:7400"\nadvertise = "node7.lan:7400"\n')
    assert str(config.node.advertise) == "node7.lan:7400"
    out = tmp_path / "out.toml"
    out.write_text(render_config_toml(config))
    assert load_config(out) == config
    assert parse_config_text("").node.advertise is None
    with pytest.raises(ConfigError, match="node.advertise"):
        parse_config_text('[node]\nadvertise = "nowhere"\n')


def test_sender_share_reaches_the_merge_guard() -> None:
    guard = parse_config_text("").gossip.guard
    assert guard is not None and guard.sender_share == 0.0  # off by default
    guard = parse_config_text("[gossip]\nsender_share = 3.0").gossip.guard
    assert guard is not None and guard.sender_share == 3.0
    with pytest.raises(ConfigError, match="gossip.sender_share"):
        parse_config_text("[gossip]\nsender_share = -1")
