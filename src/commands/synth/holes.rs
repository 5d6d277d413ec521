//! A file writer that leaves long runs of zero bytes as holes. A zero-weight model is almost all zeros: written
//! out, TinyLlama-1.1B in F16 takes 2.2 GB of disk for nothing; as holes it takes the size of its tokenizer. Readers
//! (gguf-py, llama.cpp's mmap) see zeros either way. On a file system without holes the seek still gives zeros,
//! written by the file system.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};

/// Writes of at least this many bytes, all zero, become holes; shorter ones (headers, padding) are written.
const HOLE_MIN: usize = 64 << 10;

/// A buffered file writer whose long all-zero writes move the position instead of writing.
pub(super) struct HoleWriter {
    out: BufWriter<File>,
    /// Zero bytes owed at the current position, not yet skipped over.
    hole: u64,
}

impl HoleWriter {
    pub(super) fn new(file: File) -> HoleWriter {
        HoleWriter { out: BufWriter::with_capacity(8 << 20, file), hole: 0 }
    }

    /// Skips the owed zeros: a seek past them (BufWriter writes what it holds first).
    fn skip_hole(&mut self) -> io::Result<()> {
        if self.hole > 0 {
            let by = i64::try_from(self.hole).map_err(|_| io::Error::other("hole past i64::MAX"))?;
            self.out.seek(SeekFrom::Current(by))?;
            self.hole = 0;
        }
        Ok(())
    }

    /// Writes what is buffered and sets the file's length to the end of what was written, holes included: a file that
    /// ends in a hole is only as long as its last write until its length is set.
    pub(super) fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        let end = self.out.stream_position()? + self.hole;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.set_len(end)
    }
}

impl Write for HoleWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.len() >= HOLE_MIN && data.iter().all(|&b| b == 0) {
            self.hole += data.len() as u64;
            return Ok(data.len());
        }
        self.skip_hole()?;
        self.out.write(data)
    }

    /// Writes what is buffered; owed zeros stay owed (a seek past the end does not lengthen the file): `finish` settles
    /// them.
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// What is read back equals what was written, byte for byte, whatever mix of holes, short zero runs and data;
    /// long zero runs take no blocks.
    #[test]
    fn reads_back_what_was_written_and_long_zero_runs_take_no_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let cases: Vec<Vec<Vec<u8>>> = vec![
            vec![b"head".to_vec(), vec![0; 4 << 20], b"tail".to_vec()],
            vec![vec![0; 100], vec![1; 10], vec![0; HOLE_MIN - 1]],
            vec![b"x".to_vec(), vec![0; 8 << 20]], // ends in a hole
            vec![vec![0; 8 << 20], vec![0; HOLE_MIN], vec![7; 3]],
            vec![],
        ];
        for (i, writes) in cases.iter().enumerate() {
            let path = dir.path().join(format!("{i}"));
            let mut w = HoleWriter::new(File::create(&path).unwrap());
            for data in writes {
                w.write_all(data).unwrap();
            }
            w.flush().unwrap();
            w.finish().unwrap();
            let want = writes.concat();
            assert_eq!(std::fs::read(&path).unwrap(), want, "case {i}");
            let on_disk = std::fs::metadata(&path).unwrap().blocks() * 512;
            let zeros_in_holes: usize =
                writes.iter().filter(|d| d.len() >= HOLE_MIN && d.iter().all(|&b| b == 0)).map(Vec::len).sum();
            // Allocated blocks cover at most the written bytes plus a block's rounding per write.
            if zeros_in_holes > 0 {
                assert!(
                    on_disk < (want.len() - zeros_in_holes + 64 * 1024) as u64,
                    "case {i}: {on_disk} bytes on disk"
                );
            }
        }
    }
}
