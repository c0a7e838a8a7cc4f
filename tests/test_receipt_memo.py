"""What the receipts check shares between receipts never changes an answer (issue 14).

``check_run_receipts`` verifies each run's receipts with one ``ReceiptMemo``: the sealing
checkpoint note every receipt carries is opened (form, Ed25519 signature, body) once, keyed by
its exact bytes and the exact signer text. An artifact receipt hands the root it computed from
its JSON proof to the COSE check (``known_root``), which uses it only for exactly the same
inputs. These tests verify a good receipt first (so the memo is warm), then a tampered second
one, and demand the same error, word for word, as a verification without any memo.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.cose import inclusion_receipt
from harness.receipts.keys import OperatorKeys
from harness.receipts.merkle import MerkleTree
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.cose import CoseError, CoseSignatureError, verify_inclusion_receipt
from harness.verify.errors import VerificationError
from harness.verify.layout import receipt_member
from harness.verify.merkle import leaf_hash, root_from_inclusion_proof
from harness.verify.note import open_note_signed_once, parse_verifier_key
from harness.verify.policy import TrustPolicy
from harness.verify.receipt import (
    ReceiptError,
    ReceiptMemo,
    _is_signed_note_of,
    final_note_text,
    parse_receipt,
    verify_receipt,
)
from harness.verify.records import HEX64_RE

from .corpus import RUN_ID, Bundle, attacker_keys, export_run, operator_keys
from .test_cose import _proof, _with_proofs

FIRST, SECOND = receipt_member(RUN_ID, 0), receipt_member(RUN_ID, 1)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """A bundle whose run has two final artifacts (seq 0 and 1), one sealing checkpoint."""
    _, path = export_run(tmp_path_factory.mktemp("memo"), operator_keys())
    exported = Bundle.from_tar(path.read_bytes(), operator_keys())
    assert exported.manifest["runs"][0]["receipts"] == [0, 1]
    return exported


def _signer(keys: OperatorKeys) -> str:
    return keys.note_signer().verifier_key()


def _text_and_signature(note: str) -> tuple[str, str]:
    text, _, signature = note.partition("\n\n")
    return text + "\n", signature


def _flip_signature(note: str) -> str:
    """The same note text with one bit of its Ed25519 signature flipped (canonical base64)."""
    text, line = _text_and_signature(note)
    name, _, b64 = line.rstrip("\n").rpartition(" ")
    raw = bytearray(base64.b64decode(b64))
    raw[10] ^= 1
    return f"{text}\n{name} {base64.b64encode(bytes(raw)).decode()}\n"


def _other_root(note: str) -> str:
    """Same origin and size, another root, the original signature line kept."""
    text, line = _text_and_signature(note)
    origin, size, _root = text.splitlines()
    return f"{origin}\n{size}\n{base64.b64encode(b'x' * 32).decode()}\n\n{line}"


def _other_root_signed(note: str) -> str:
    """Same origin and size, another root, validly signed by the operator key."""
    text, _ = _text_and_signature(note)
    origin, size, _root = text.splitlines()
    other = f"{origin}\n{size}\n{base64.b64encode(b'x' * 32).decode()}\n"
    return operator_keys().note_signer().sign(other).decode()


def _cosigned(note: str) -> str:
    """The genuine note with a second signature line by another key."""
    text, line = _text_and_signature(note)
    extra = attacker_keys().note_signer().sign(text).decode().partition("\n\n")[2]
    return f"{text}\n{line}{extra}"


def _signed_by_attacker(note: str) -> str:
    text, _ = _text_and_signature(note)
    return attacker_keys().note_signer().sign(text).decode()


def _other_origin_signed(note: str) -> str:
    text, _ = _text_and_signature(note)
    origin, size, root = text.splitlines()
    return operator_keys().note_signer().sign(f"{origin}x\n{size}\n{root}\n").decode()


CHECKPOINT_TAMPERS: list[tuple[str, Callable[[str], str], str]] = [
    ("signature bit", _flip_signature, "receipt checkpoint: invalid signature"),
    ("root, same origin and size", _other_root, "receipt checkpoint: invalid signature"),
    ("root, same origin and size, signed", _other_root_signed, "inclusion proof: computed root"),
    ("second signature line", _cosigned, "exactly one, by the signer"),
    ("signed by another key", _signed_by_attacker, "no signature from a known key"),
    ("other origin, signed", _other_origin_signed, "not this run's lineage"),
]


def _tampered(data: bytes, field: str, change: Callable[[str], str]) -> bytes:
    doc: dict[str, Any] = parse_canonical(data)
    doc[field] = change(doc[field])
    return canonical_bytes(doc)


def _error(data: bytes, memo: ReceiptMemo | None) -> str:
    with pytest.raises(ReceiptError) as caught:
        verify_receipt(data, signer=_signer(operator_keys()), memo=memo)
    return str(caught.value)


@pytest.mark.parametrize(
    ("change", "reason"),
    [pytest.param(change, reason, id=name) for name, change, reason in CHECKPOINT_TAMPERS],
)
def test_a_tampered_checkpoint_after_a_good_receipt_fails_as_without_the_memo(
    bundle: Bundle, change: Callable[[str], str], reason: str
) -> None:
    """A note that differs in any byte from the one remembered is opened from scratch."""
    signer = _signer(operator_keys())
    memo = ReceiptMemo()
    good = verify_receipt(bundle.members[FIRST], signer=signer, memo=memo)
    tampered = _tampered(bundle.members[SECOND], "checkpoint", change)
    cold = _error(tampered, None)
    assert reason in cold
    assert _error(tampered, memo) == cold
    # a failure is not remembered: it fails again, and the good note still passes
    assert _error(tampered, memo) == cold
    assert verify_receipt(bundle.members[SECOND], signer=signer, memo=memo).leaf_index == 1
    assert verify_receipt(bundle.members[FIRST], signer=signer, memo=memo) == good


def test_a_tampered_checkpoint_first_does_not_poison_the_memo(bundle: Bundle) -> None:
    signer = _signer(operator_keys())
    memo = ReceiptMemo()
    tampered = _tampered(bundle.members[SECOND], "checkpoint", _flip_signature)
    assert _error(tampered, memo) == _error(tampered, None)
    for member in (FIRST, SECOND):
        assert verify_receipt(bundle.members[member], signer=signer, memo=memo)


def test_the_memo_is_keyed_by_the_signer_text_too(bundle: Bundle) -> None:
    """The same note under another declared signer is opened with that signer's key."""
    memo = ReceiptMemo()
    verify_receipt(bundle.members[FIRST], signer=_signer(operator_keys()), memo=memo)
    other = _tampered(bundle.members[SECOND], "signer", lambda _: _signer(attacker_keys()))
    with pytest.raises(ReceiptError) as warm:
        verify_receipt(other, memo=memo)
    with pytest.raises(ReceiptError) as cold:
        verify_receipt(other)
    assert str(warm.value) == str(cold.value)
    assert str(cold.value).startswith("receipt checkpoint: ")


@pytest.mark.parametrize(
    ("field", "change", "reason"),
    [
        ("final", _flip_signature, "not signed as a final artifact"),
        ("final", _signed_by_attacker, "not signed as a final artifact"),
        (
            "audit_path",
            lambda path: [("0" if path[0][0] != "0" else "1") + path[0][1:], *path[1:]],
            "inclusion proof: computed root",
        ),
        ("cose", lambda c: c[:-8] + "AAAAAAA=", "COSE receipt"),
    ],
)
def test_other_tampering_of_a_second_receipt_fails_as_without_the_memo(
    bundle: Bundle, field: str, change: Callable[[Any], Any], reason: str
) -> None:
    signer = _signer(operator_keys())
    memo = ReceiptMemo()
    verify_receipt(bundle.members[FIRST], signer=signer, memo=memo)
    tampered = _tampered(bundle.members[SECOND], field, change)
    cold = _error(tampered, None)
    assert reason in cold
    assert _error(tampered, memo) == cold


def test_the_cose_receipt_of_another_leaf_fails_as_before(bundle: Bundle) -> None:
    """Receipt 1 carrying receipt 0's (genuine) COSE receipt: the COSE proof is not the JSON
    one, so the root the JSON proof gave is not used and the COSE signature check fails."""
    first: dict[str, Any] = parse_canonical(bundle.members[FIRST])
    swapped = _tampered(bundle.members[SECOND], "cose", lambda _: first["cose"])
    message = _error(swapped, ReceiptMemo())
    assert message == _error(swapped, None)
    assert message.startswith("COSE receipt: COSE receipt signature does not verify over the root")


def test_the_bundle_check_refuses_a_tampered_second_receipt(bundle: Bundle) -> None:
    """End to end: receipt 0 verifies (the memo holds the sealing note), receipt 1 carries the
    same checkpoint text with a flipped signature bit: the bundle is invalid, naming it."""
    edited = bundle.copy()
    edited.members[SECOND] = _tampered(edited.members[SECOND], "checkpoint", _flip_signature)
    keys = operator_keys()
    report = verify_bundle(
        io.BytesIO(edited.resign()),
        pins=TrustPolicy(frozenset({keys.key_id}), "test"),
    )
    assert report.status.value == "invalid"
    assert report.failure is not None
    assert report.failure.check == "receipts"
    assert report.failure.member == SECOND
    assert "receipt checkpoint: invalid signature" in report.failure.reason


# --------------------------------------------------------------------------- known_root

KEY = Ed25519PrivateKey.from_private_bytes(b"\x09" * 32)
PUB = KEY.public_key()


def _cose(size: int, index: int) -> tuple[bytes, MerkleTree]:
    tree = MerkleTree([leaf_hash(b"leaf %d" % i) for i in range(size)])
    receipt = inclusion_receipt(
        KEY,
        kid=b"k",
        tree_size=size,
        leaf_index=index,
        path=tree.inclusion_proof(index),
        root=tree.root(),
    )
    return receipt, tree


def test_a_known_root_for_exactly_these_inputs_gives_the_same_result() -> None:
    receipt, tree = _cose(6, 4)
    path = tuple(tree.inclusion_proof(4))
    root = root_from_inclusion_proof(4, 6, tree.leaf(4), path)
    plain = verify_inclusion_receipt(receipt, PUB, tree.leaf(4))
    assert (
        verify_inclusion_receipt(
            receipt, PUB, tree.leaf(4), known_root=(4, 6, tree.leaf(4), path, root)
        )
        == plain
    )


def _forged(receipt: bytes, tree: MerkleTree) -> list[tuple[bytes, bytes]]:
    """(message, leaf hash) pairs whose proof or leaf is not the genuine leaf 4 of 6."""
    path = tree.inclusion_proof(4)
    flipped = [path[0][::-1], *path[1:]]
    return [
        (_with_proofs(receipt, [_proof(6, 5, path)]), tree.leaf(4)),  # same path shape
        (_with_proofs(receipt, [_proof(6, 4, flipped)]), tree.leaf(4)),
        (_with_proofs(receipt, [_proof(6, 4, path[:-1])]), tree.leaf(4)),
        (_with_proofs(receipt, [_proof(7, 4, path)]), tree.leaf(4)),
        (receipt, tree.leaf(3)),
    ]


def test_a_known_root_for_other_inputs_is_not_used() -> None:
    """The genuine root of leaf 4, handed over for leaf 4's genuine proof, does not let a
    forged proof or another leaf pass: each fails exactly as without the hint."""
    receipt, tree = _cose(6, 4)
    path = tuple(tree.inclusion_proof(4))
    known = (4, 6, tree.leaf(4), path, tree.root())
    for message, leaf in _forged(receipt, tree):
        with pytest.raises(CoseError) as cold:
            verify_inclusion_receipt(message, PUB, leaf)
        with pytest.raises(CoseError) as hinted:
            verify_inclusion_receipt(message, PUB, leaf, known_root=known)
        assert (type(hinted.value), str(hinted.value)) == (type(cold.value), str(cold.value))


WRONG = b"x" * 32


@pytest.mark.parametrize(
    ("size", "index", "known"),
    [
        pytest.param(2, 1, lambda p, leaf: (True, 2, leaf, p, WRONG), id="bool index"),
        pytest.param(1, 0, lambda p, leaf: (0, True, leaf, p, WRONG), id="bool size"),
        pytest.param(
            2, 1, lambda p, leaf: (1, 2, leaf, tuple(map(bytearray, p)), WRONG), id="bytearray path"
        ),
        pytest.param(2, 1, lambda p, leaf: (1, 2, bytearray(leaf), p, WRONG), id="bytearray leaf"),
    ],
)
def test_a_known_root_is_used_only_for_inputs_of_the_exact_types(
    size: int, index: int, known: Callable[[tuple[bytes, ...], bytes], Any]
) -> None:
    """Equal values of other types (``True == 1``, ``bytearray == bytes``) are other inputs:
    the (here deliberately wrong) hint is ignored and the genuine receipt verifies."""
    receipt, tree = _cose(size, index)
    path = tuple(tree.inclusion_proof(index))
    hint = known(path, tree.leaf(index))
    result = verify_inclusion_receipt(receipt, PUB, tree.leaf(index), known_root=hint)
    assert result.root == tree.root()


def test_a_known_root_is_what_the_signature_is_checked_over() -> None:
    """Pins that the hint is used at all (and why only a root the caller computed itself may
    be passed): a wrong root for exactly the receipt's inputs fails the signature."""
    receipt, tree = _cose(2, 1)
    path = tuple(tree.inclusion_proof(1))
    with pytest.raises(CoseSignatureError):
        verify_inclusion_receipt(
            receipt, PUB, tree.leaf(1), known_root=(1, 2, tree.leaf(1), path, WRONG)
        )


def test_the_receipts_check_is_unchanged_on_a_good_bundle(bundle: Bundle) -> None:
    keys = operator_keys()
    report = verify_bundle(
        io.BytesIO(bundle.resign()),
        pins=TrustPolicy(frozenset({keys.key_id}), "test"),
    )
    assert report.status.value == "verified", report.failure
    assert report.check("receipts").outcome.value == "passed"


# --------------------------------------------------------------------------- final note


def _final_of(bundle: Bundle) -> tuple[bytes, str, Any]:
    doc: dict[str, Any] = parse_canonical(bundle.members[SECOND])
    line = doc["record"].encode()
    return (
        doc["final"].encode(),
        final_note_text(RUN_ID, doc["leaf_index"], line),
        parse_verifier_key(doc["signer"]),
    )


def _generic_accepts(note: bytes, text: str, signer: str) -> bool:
    try:
        opened = open_note_signed_once(note, [signer])
    except VerificationError:
        return False
    return opened.text == text


def test_the_final_note_fast_path_takes_the_writers_form(bundle: Bundle) -> None:
    note, text, vkey = _final_of(bundle)
    assert _is_signed_note_of(note, text, vkey)
    assert _generic_accepts(note, text, vkey.text)


def _variants(note: bytes, text: str) -> list[bytes]:
    body, _, line = note.partition(b"\n\n")
    name, _, b64 = line.rstrip(b"\n").rpartition(b" ")
    raw = base64.b64decode(b64)
    other = attacker_keys().note_signer().sign(text).partition(b"\n\n")[2]
    return [
        note[:-1],  # no final newline
        note + b"\n",
        note.replace(b"\n\n", b"\n\n\n"),
        note.replace(b"\n", b"\r\n"),
        body + b"\n\n" + line + other,  # a second signature line
        body + b"\n\n" + other + line,
        body + b"\n\n" + other,
        body + b"\n\n" + name + b" " + base64.b64encode(raw[:-1]) + b"\n",  # 63-byte signature
        body + b"\n\n" + name + b" " + base64.b64encode(raw + b"\x00") + b"\n",
        body + b"\n\n" + name + b"  " + b64 + b"\n",
        body + b"\n\n" + name + b"x " + b64 + b"\n",
        body + b"\n\n" + name + b" " + b64[:-2] + b"==\n",  # other padding / trailing bits
        body + b"\n\n" + name + b" " + base64.urlsafe_b64encode(raw) + b"\n",
        body.replace(b"\n", b"\nx", 1) + b"\n\n" + line,
        b" " + note,
        note.replace("—".encode(), b"-"),
    ]


def test_the_final_note_fast_path_never_accepts_what_the_general_path_refuses(
    bundle: Bundle,
) -> None:
    note, text, vkey = _final_of(bundle)
    for variant in _variants(note, text):
        if _is_signed_note_of(variant, text, vkey):
            assert _generic_accepts(variant, text, vkey.text), variant


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_final_note_fast_path_agrees_on_edited_notes(bundle: Bundle, data: Any) -> None:
    """Random byte edits (replace, insert, delete) of a genuine note: the fast path accepts
    only what ``open_note_signed_once`` accepts with the expected text."""
    note, text, vkey = _final_of(bundle)
    edited = bytearray(note)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(edited)))
        action = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.integers(0, 255))
        if action == "insert":
            edited.insert(at, byte)
        elif at < len(edited):
            if action == "replace":
                edited[at] = byte
            else:
                del edited[at]
    if _is_signed_note_of(bytes(edited), text, vkey):
        assert _generic_accepts(bytes(edited), text, vkey.text)


@pytest.mark.parametrize("index", range(16))
def test_a_final_note_variant_fails_with_the_same_error_as_before(
    bundle: Bundle, index: int
) -> None:
    """Every variant the fast path declines is opened the general way: the receipt fails
    exactly as ``open_note_signed_once`` words it (or passes, if the general path accepts)."""
    note, text, vkey = _final_of(bundle)
    variant = _variants(note, text)[index]
    tampered = _tampered(bundle.members[SECOND], "final", lambda _: variant.decode("utf-8"))
    try:
        opened = open_note_signed_once(variant, [vkey.text])
    except VerificationError as exc:
        expected: str | None = (
            f"receipt is not signed as a final artifact (a write of a merged task): {exc}"
        )
    else:
        expected = (
            None
            if opened.text == text
            else "the signed final-artifact note names another record than this receipt's"
        )
    if expected is None:
        assert verify_receipt(tampered, signer=vkey.text).leaf_index == 1
    else:
        assert _error(tampered, ReceiptMemo()) == expected


# --------------------------------------------------------------------------- audit_path form

hexish = st.text(alphabet="0123456789abcdefABCDEFg \n", min_size=62, max_size=66)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.one_of(hexish, st.text(max_size=70), st.integers(-5, 5)), max_size=4))
def test_the_audit_path_form_check_is_hex64_on_each_hash(bundle: Bundle, path: list[Any]) -> None:
    """parse_receipt tests the hashes in one regular expression call: it refuses exactly the
    lists where some element is not a string that HEX64_RE (records.py) fully matches."""
    doc: dict[str, Any] = parse_canonical(bundle.members[SECOND])
    doc["audit_path"] = path
    refused = any(type(h) is not str or not HEX64_RE.fullmatch(h) for h in path)
    try:
        parse_receipt(canonical_bytes(doc))
    except ReceiptError as exc:
        assert refused and str(exc) == "audit_path must hold 64-hex-digit hashes"
    else:
        assert not refused


def test_the_audit_path_check_sees_each_hash_not_just_the_join(bundle: Bundle) -> None:
    doc: dict[str, Any] = parse_canonical(bundle.members[SECOND])
    good = doc["audit_path"][0]
    for path in ([good[:-1], good[-1] + good], [good + "a", good[:-1]], [good.upper()]):
        doc["audit_path"] = path
        with pytest.raises(ReceiptError, match="audit_path must hold"):
            parse_receipt(canonical_bytes(doc))
