#!/usr/bin/python3
"""read_events.py: an independent reader of zactor's TensorBoard event files,
for tests/test_summary.c. It shares no code with the C writer:

  * reads the TFRecord framing itself and checks both masked CRC32Cs with its
    own CRC32C (table-driven, Castagnoli);
  * decodes each record with Python protobuf, using message classes that protoc
    generates from a minimal event.proto at run time in a temp dir;
  * checks that the first event holds file_version "brain.Event:2" and that every
    later one holds a summary, and that each record is the canonical encoding
    (the parsed message serializes back to the same bytes);
  * prints one line per scalar: "STEP TAG VALUE", VALUE as Python's repr of the
    float (exact for a float32).

Usage: read_events.py EVENT_FILE. Exit 0 when the file is valid, 1 when it is
not, 2 when protobuf or protoc is missing (what is missing goes to stderr).
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

EXIT_INVALID = 1
EXIT_MISSING_TOOL = 2
FILE_VERSION = "brain.Event:2"
MASK_DELTA = 0xA282EAD8
CASTAGNOLI_REFLECTED = 0x82F63B78

EVENT_PROTO = """\
syntax = "proto3";
package tensorflow;
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    Summary summary = 5;
  }
}
message Summary {
  message Value {
    string tag = 1;
    oneof value {
      float simple_value = 2;
    }
  }
  repeated Value value = 1;
}
"""


def fail(message, code=EXIT_INVALID):
    sys.stderr.write("read_events.py: %s\n" % message)
    sys.exit(code)


def make_crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ CASTAGNOLI_REFLECTED if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = make_crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def read_records(path):
    """The data of each TFRecord in the file, both CRCs checked."""
    with open(path, "rb") as f:
        blob = f.read()
    records = []
    offset = 0
    while offset < len(blob):
        if len(blob) - offset < 12:
            fail("%s: torn record header at offset %d" % (path, offset))
        length_bytes = blob[offset:offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[offset + 8:offset + 12])
        if length_crc != masked_crc32c(length_bytes):
            fail("%s: bad length CRC at offset %d" % (path, offset))
        data_begin = offset + 12
        data_end = data_begin + length
        if data_end + 4 > len(blob):
            fail("%s: torn record data at offset %d" % (path, offset))
        data = blob[data_begin:data_end]
        (data_crc,) = struct.unpack("<I", blob[data_end:data_end + 4])
        if data_crc != masked_crc32c(data):
            fail("%s: bad data CRC at offset %d" % (path, offset))
        records.append(data)
        offset = data_end + 4
    return records


def compile_proto(tmp_dir, name, text):
    """Generates NAME_pb2 from the .proto text with protoc in tmp_dir and
    imports it (exit 2 when protobuf or protoc is missing)."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError as error:
        fail("%s cannot import google.protobuf (%s): install python3-protobuf"
             % (sys.executable, error), EXIT_MISSING_TOOL)
    protoc = shutil.which("protoc")
    if not protoc:
        fail("protoc not found on PATH: install protobuf-compiler", EXIT_MISSING_TOOL)
    with open(os.path.join(tmp_dir, name + ".proto"), "w") as f:
        f.write(text)
    result = subprocess.run([protoc, "--proto_path=" + tmp_dir, "--python_out=" + tmp_dir,
                             os.path.join(tmp_dir, name + ".proto")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        fail("protoc failed: %s" % result.stdout.decode(errors="replace"),
             EXIT_MISSING_TOOL)
    sys.path.insert(0, tmp_dir)
    return __import__(name + "_pb2")


def load_event_pb2(tmp_dir):
    """Generates event_pb2 with protoc in tmp_dir and imports it."""
    return compile_proto(tmp_dir, "event", EVENT_PROTO)


def main():
    if len(sys.argv) != 2:
        fail("usage: read_events.py EVENT_FILE")
    path = sys.argv[1]
    tmp_dir = tempfile.mkdtemp(prefix="za_read_events_")
    try:
        # First, so that a machine without protobuf or protoc always says so.
        event_pb2 = load_event_pb2(tmp_dir)
        records = read_records(path)
        if not records:
            fail("%s: no records" % path)
        lines = []
        for index, data in enumerate(records):
            event = event_pb2.Event()
            event.ParseFromString(data)
            if event.SerializeToString() != data:
                fail("%s: record %d is not the canonical encoding of an Event"
                     % (path, index))
            if event.wall_time <= 0:
                fail("%s: record %d has wall_time %r" % (path, index, event.wall_time))
            what = event.WhichOneof("what")
            if index == 0:
                if what != "file_version" or event.file_version != FILE_VERSION:
                    fail("%s: first event is not file_version %r" % (path, FILE_VERSION))
                continue
            if what != "summary":
                fail("%s: record %d holds %r, not a summary" % (path, index, what))
            for value in event.summary.value:
                if value.WhichOneof("value") != "simple_value":
                    fail("%s: record %d: tag %r has no simple_value"
                         % (path, index, value.tag))
                lines.append("%d %s %r" % (event.step, value.tag, value.simple_value))
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    sys.stdout.write("".join(line + "\n" for line in lines))


if __name__ == "__main__":
    main()
