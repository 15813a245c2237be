//! The structural zstd frame walk against libzstd itself, on every header shape RFC 8878
//! allows (FAILURE-JSONL-ZSTD-SCAN).
//!
//! Our writer only ever emits one shape (libzstd's defaults), but a session file may have
//! been written by another encoder or edited by hand: the walk must find each frame's end
//! wherever the format puts it — after a window byte or not, a dictionary id of 0, 1, 2 or
//! 4 bytes, a content size of 0, 1, 2, 4 or 8 bytes, RLE blocks that store one byte for many,
//! and an optional checksum. The oracle is libzstd: `ZSTD_findFrameCompressedSize` on the
//! same bytes, and for frames without a dictionary a full decode.

use faultline_runtime::testing::{walk_frames, FrameSpan, FrameWalk};
use zstd::zstd_safe;

const FRAME_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Window descriptor byte for a 1 MiB window (exponent 10, mantissa 0): larger than any
/// content below.
const WINDOW_1_MIB: u8 = 10 << 3;

#[derive(Debug, Clone, Copy)]
enum Block {
    /// Stored as is: `n` bytes in the file.
    Raw(usize),
    /// One byte in the file, repeated `n` times.
    Rle(usize),
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    single_segment: bool,
    /// Frame_Content_Size_Flag (0..=3).
    content_size_flag: u8,
    /// 0, 1, 2 or 4.
    dictionary_id_bytes: usize,
    checksum: bool,
}

impl Shape {
    fn every() -> Vec<Shape> {
        let mut shapes = Vec::new();
        for single_segment in [false, true] {
            for content_size_flag in 0..=3 {
                for dictionary_id_bytes in [0, 1, 2, 4] {
                    for checksum in [false, true] {
                        shapes.push(Shape { single_segment, content_size_flag, dictionary_id_bytes, checksum });
                    }
                }
            }
        }
        shapes
    }

    /// Blocks whose content fits the shape's content-size field (1 byte: at most 255;
    /// 2 bytes: 256..=65 791).
    fn blocks(&self) -> Vec<Block> {
        match (self.content_size_flag, self.single_segment) {
            (0, true) => vec![Block::Raw(10), Block::Rle(200), Block::Raw(5)],
            (1, _) => vec![Block::Raw(300), Block::Rle(1_000), Block::Raw(7)],
            _ => vec![Block::Raw(300), Block::Rle(100_000), Block::Raw(7)],
        }
    }
}

fn content_of(blocks: &[Block]) -> Vec<u8> {
    let mut content = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match *block {
            Block::Raw(n) => content.extend((0..n).map(|k| b'a' + ((k + i) % 26) as u8)),
            Block::Rle(n) => content.extend(std::iter::repeat_n(b'r', n)),
        }
    }
    content
}

/// The content checksum libzstd writes (low 32 bits of XXH64), taken from its own frame.
fn checksum_of(content: &[u8]) -> [u8; 4] {
    let mut compressor = zstd::bulk::Compressor::new(1).unwrap();
    compressor.set_parameter(zstd_safe::CParameter::ChecksumFlag(true)).unwrap();
    let frame = compressor.compress(content).unwrap();
    frame[frame.len() - 4..].try_into().unwrap()
}

/// A frame of `shape` built byte by byte, and its content.
fn handmade(shape: Shape) -> (Vec<u8>, Vec<u8>) {
    let blocks = shape.blocks();
    let content = content_of(&blocks);
    let dictionary_flag = match shape.dictionary_id_bytes {
        0 => 0,
        1 => 1,
        2 => 2,
        4 => 3,
        other => unreachable!("{other}"),
    };
    let descriptor = shape.content_size_flag << 6
        | u8::from(shape.single_segment) << 5
        | u8::from(shape.checksum) << 2
        | dictionary_flag;
    let mut frame = FRAME_MAGIC.to_vec();
    frame.push(descriptor);
    if !shape.single_segment {
        frame.push(WINDOW_1_MIB);
    }
    frame.extend(&0x0403_0201_u32.to_le_bytes()[..shape.dictionary_id_bytes]);
    let size = content.len() as u64;
    match (shape.content_size_flag, shape.single_segment) {
        (0, false) => {}
        (0, true) => frame.push(u8::try_from(size).unwrap()),
        (1, _) => frame.extend(u16::try_from(size - 256).unwrap().to_le_bytes()),
        (2, _) => frame.extend(u32::try_from(size).unwrap().to_le_bytes()),
        _ => frame.extend(size.to_le_bytes()),
    }
    for (i, block) in blocks.iter().enumerate() {
        let last = u32::from(i + 1 == blocks.len());
        let (block_type, n) = match *block {
            Block::Raw(n) => (0u32, n),
            Block::Rle(n) => (1u32, n),
        };
        let header = last | block_type << 1 | u32::try_from(n).unwrap() << 3;
        frame.extend(&header.to_le_bytes()[..3]);
        let start: usize = blocks[..i]
            .iter()
            .map(|b| match *b {
                Block::Raw(n) | Block::Rle(n) => n,
            })
            .sum();
        match *block {
            Block::Raw(n) => frame.extend(&content[start..start + n]),
            Block::Rle(_) => frame.push(b'r'),
        }
    }
    if shape.checksum {
        frame.extend(checksum_of(&content));
    }
    (frame, content)
}

/// Cuts worth judging: every byte of the headers, then a stride through the bodies, and the
/// last bytes (the checksum and the final block's end).
fn cuts(len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> =
        (1..len.min(48)).chain((48..len).step_by(97)).chain(len.saturating_sub(8)..len).collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.retain(|&cut| cut > 0 && cut < len);
    cuts
}

#[test]
fn every_frame_header_shape_ends_where_libzstd_says() {
    for shape in Shape::every() {
        let (frame, content) = handmade(shape);
        assert_eq!(
            zstd_safe::find_frame_compressed_size(&frame),
            Ok(frame.len()),
            "{shape:?}: the handmade frame is one whole frame to libzstd"
        );
        if shape.dictionary_id_bytes == 0 {
            assert_eq!(zstd::decode_all(&frame[..]).unwrap(), content, "{shape:?}: libzstd decodes it");
        }
        // The content size it declares, read as libzstd reads it.
        let content_bytes = zstd_safe::get_frame_content_size(&frame).expect("a frame header");
        let declared = shape.single_segment || shape.content_size_flag > 0;
        assert_eq!(content_bytes, declared.then_some(content.len() as u64), "{shape:?}");
        let whole = FrameSpan { start: 0, end: frame.len(), has_checksum: shape.checksum, content_bytes };
        assert_eq!(walk_frames(&frame), FrameWalk::Complete(vec![whole]), "{shape:?}");
    }
}

#[test]
fn a_frame_of_any_shape_cut_anywhere_is_torn_at_its_start() {
    for shape in Shape::every() {
        let (frame, _) = handmade(shape);
        for cut in cuts(frame.len()) {
            let prefix = &frame[..cut];
            assert!(zstd_safe::find_frame_compressed_size(prefix).is_err(), "{shape:?} cut at {cut}: libzstd agrees");
            assert_eq!(
                walk_frames(prefix),
                FrameWalk::Torn { frames: vec![], torn_at: 0 },
                "{shape:?} cut at {cut} of {}",
                frame.len()
            );
        }
    }
}

#[test]
fn frames_of_every_shape_back_to_back_are_walked_one_by_one() {
    let mut file = Vec::new();
    let mut expected = Vec::new();
    for shape in Shape::every() {
        let (frame, _) = handmade(shape);
        let start = file.len();
        file.extend(&frame);
        let content_bytes = zstd_safe::get_frame_content_size(&frame).expect("a frame header");
        expected.push(FrameSpan { start, end: file.len(), has_checksum: shape.checksum, content_bytes });
    }
    // What libzstd reads, frame after frame.
    let mut at = 0;
    for span in &expected {
        assert_eq!(zstd_safe::find_frame_compressed_size(&file[at..]), Ok(span.end - span.start));
        at = span.end;
    }
    assert_eq!(walk_frames(&file), FrameWalk::Complete(expected.clone()));
    let last = expected.last().unwrap();
    assert_eq!(
        walk_frames(&file[..last.end - 1]),
        FrameWalk::Torn { frames: expected[..expected.len() - 1].to_vec(), torn_at: last.start }
    );
}

/// SPEC: "bad magic with ≥ 4 bytes left → corruption"; fewer cannot be judged (a frame whose
/// append was cut inside its magic), so they are torn.
#[test]
fn bad_magic_is_corruption_from_exactly_four_bytes_and_torn_below() {
    let (frame, _) =
        handmade(Shape { single_segment: true, content_size_flag: 0, dictionary_id_bytes: 0, checksum: true });
    let content_bytes = zstd_safe::get_frame_content_size(&frame).expect("a frame header");
    let whole = FrameSpan { start: 0, end: frame.len(), has_checksum: true, content_bytes };
    for left in 1..=3 {
        let file = [frame.as_slice(), &b"XYZW"[..left]].concat();
        assert_eq!(
            walk_frames(&file),
            FrameWalk::Torn { frames: vec![whole], torn_at: frame.len() },
            "{left} bytes left"
        );
    }
    for garbage in [&b"XYZW"[..], &b"XYZWV"[..]] {
        let file = [frame.as_slice(), garbage].concat();
        match walk_frames(&file) {
            FrameWalk::Corrupt { frames, offset, reason } => {
                assert_eq!((frames, offset), (vec![whole], frame.len()), "{} bytes left", garbage.len());
                assert!(reason.contains("magic"), "{reason}");
            }
            other => panic!("{} bytes of bad magic: {other:?}", garbage.len()),
        }
    }
    // The magic alone, whole: a frame cut just after it is torn, not corrupt.
    let file = [frame.as_slice(), &FRAME_MAGIC[..]].concat();
    assert_eq!(walk_frames(&file), FrameWalk::Torn { frames: vec![whole], torn_at: frame.len() });
}

/// SPEC: "EOF inside a frame → torn at that frame's start" — also when the file ends inside a
/// block header whose first bytes would read as the reserved block type: a header is judged
/// only when it is whole.
#[test]
fn a_frame_cut_inside_a_block_header_is_torn_whatever_its_first_bytes_read_as() {
    let shape = Shape { single_segment: true, content_size_flag: 0, dictionary_id_bytes: 0, checksum: false };
    let (frame, _) = handmade(shape);
    // Magic, descriptor, a one-byte content size: the first block header starts at 6.
    let block_header_at = 6;
    for kept in 1..3 {
        let mut cut = frame[..block_header_at + kept].to_vec();
        cut[block_header_at] = 0b110; // block type 3 (reserved), not last
        assert_eq!(walk_frames(&cut), FrameWalk::Torn { frames: vec![], torn_at: 0 }, "{kept} header bytes");
    }
    let mut whole_header = frame[..block_header_at + 3].to_vec();
    whole_header[block_header_at] = 0b110;
    assert!(
        matches!(walk_frames(&whole_header), FrameWalk::Corrupt { offset: 6, .. }),
        "a whole header of the reserved type is corruption"
    );
}
