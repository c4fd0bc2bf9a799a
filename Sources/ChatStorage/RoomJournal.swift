import ChatCore
import Glibc

/// Events of one room encoded as one `event_chunks` row (`EventChunk`'s blob and the columns
/// beside it): what a commit appends to the journal and the database later inserts as it is,
/// so each event is encoded once.
public struct EncodedChunk: Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// The first event's `seq`.
    public var firstSeq: UInt64
    /// The last event's `seq`.
    public var lastSeq: UInt64
    /// The oldest event's time (what retention by age finds chunks by).
    public var oldestTime: UInt64
    /// How many events.
    public var count: Int
    /// What they count for against the retention bounds (`StoredEvent.storedBytes`, summed).
    public var bytes: Int
    /// `EventChunk.encoded()` of the events.
    public var blob: [UInt8]

    /// Describes a chunk.
    public init(room: String, firstSeq: UInt64, lastSeq: UInt64, oldestTime: UInt64, count: Int, bytes: Int, blob: [UInt8]) {
        self.room = room
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
        self.oldestTime = oldestTime
        self.count = count
        self.bytes = bytes
        self.blob = blob
    }
}

/// An append-only file of commits in front of the database: a commit is one record, written with
/// one `write(2)` before the commit's frames leave, and the database takes the records later,
/// many at once (docs/BENCHMARKS.md, "Where durable's 50-client gap comes from": a transaction a
/// turn cost the durable default 12–15% of memory mode's throughput at 50 clients, a journal
/// with SQLite in batches of 100 ms about 8%).
///
/// The files are `journal-<number>.log` in the data directory, numbered from 1 up; appends go
/// to the newest, and `rotate()` starts the next, so that the files the database has taken in
/// can be deleted whole (`remove(through:in:)`).
///
/// A record: the magic number `CJR1`, the payload's length (4 bytes), a checksum of the
/// payload (8 bytes), all little-endian, then the payload — the rooms' records and the chunks,
/// in varints and length-prefixed strings. A record cut short or altered (a power loss in the
/// middle of a write) ends what `read(_:)` returns, and says so.
///
/// Appends, `rotate()` and `close()` come from one queue at a time; `sync()` from any thread.
/// `@unchecked Sendable`: the descriptor is swapped and synced under `lock`.
public final class RoomJournal: @unchecked Sendable {
    /// One commit's record: the latest record of each room it touched, and its events as chunks.
    public struct Record: Sendable, Equatable {
        /// The rooms' records, at most one per room.
        public var rooms: [RoomRecord]
        /// The events, each room's in `seq` order.
        public var chunks: [EncodedChunk]

        /// Describes a record.
        public init(rooms: [RoomRecord], chunks: [EncodedChunk]) {
            self.rooms = rooms
            self.chunks = chunks
        }
    }

    /// The directory the files are in.
    public let directory: String
    /// The number of the file appends go to (opened at the first append after `rotate()`).
    public private(set) var number: UInt64
    private var descriptor: Int32 = -1
    /// Bytes in the current file: where a failed append cuts it back to.
    private var size = 0
    // On the heap: a pthread mutex must not move once initialised.
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// The most bytes a file may hold: past it an append fails as on a full disk. For tests of
    /// that failure (`SQLiteRoomStore.capFileSize`).
    public var sizeCap: Int? {
        get { pthread_mutex_lock(lock); defer { pthread_mutex_unlock(lock) }; return cap }
        set { pthread_mutex_lock(lock); cap = newValue; pthread_mutex_unlock(lock) }
    }
    private var cap: Int?
    /// Whether a file was created since the directory was last synced (under `lock`).
    private var directoryChanged = false

    static let magic: UInt32 = 0x3152_4A43  // "CJR1", little-endian
    static let headerBytes = 16
    /// Each file begins with its own header, `CJF1`, four zero bytes and the file's number
    /// (little-endian): a file emptied or swapped for another is told from one that holds no
    /// records yet.
    static let fileMagic: UInt32 = 0x3146_4A43  // "CJF1", little-endian
    public static let fileHeaderBytes = 16

    /// A journal in `directory`, whose next file is numbered `firstNumber` or, if files there
    /// are numbered that high, after every file there now. Opens nothing until the first append
    /// or `createCurrentFile()`.
    public init(directory: String, firstNumber: UInt64 = 1) {
        self.directory = directory
        number = max(firstNumber, (Self.files(in: directory).last ?? 0) + 1)
        pthread_mutex_init(lock, nil)
    }

    deinit {
        if descriptor >= 0 { Glibc.close(descriptor) }
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    /// The path of file `number` in `directory`.
    public static func path(of number: UInt64, in directory: String) -> String {
        let digits = String(number)
        return directory + "/journal-" + String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".log"
    }

    /// The numbers of the journal files in `directory`, in order; empty if it cannot be read.
    public static func files(in directory: String) -> [UInt64] {
        var numbers: [UInt64] = []
        for name in DirectoryEntries.names(in: directory) ?? [] {
            guard name.hasPrefix("journal-"), name.hasSuffix(".log") else { continue }
            if let number = UInt64(name.dropFirst("journal-".count).dropLast(".log".count)) { numbers.append(number) }
        }
        return numbers.sorted()
    }

    /// Appends `record` to the current file with one write: all of it, or (throwing) none of it
    /// — a failed write is cut back off the file, so no torn record is left before the next.
    /// Returns the bytes written.
    @discardableResult
    public func append(_ record: Record) throws(StorageError) -> Int {
        let bytes = Self.encode(record)
        if let cap = sizeCap, size + bytes.count > cap {
            throw StorageError("cannot write the journal \(Self.path(of: number, in: directory)): database or disk is full")
        }
        if descriptor < 0 { try createCurrentFile() }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if result < 0, errno == EINTR { continue }
            guard result > 0 else {
                let reason = String(cString: strerror(result < 0 ? errno : ENOSPC))
                ftruncate(descriptor, off_t(size))
                throw StorageError("cannot write the journal \(Self.path(of: number, in: directory)): \(reason)")
            }
            written += result
        }
        size += written
        return written
    }

    /// Creates the current file (`number`) with its header, unless it is open already: appends
    /// then go to it. The store creates each file as soon as the one before it ends, so that
    /// the database can name the file that must be there (`RoomDatabase.JournalState`) even
    /// when nothing is appended to it. Its name is durable once the directory is synced (`sync`).
    public func createCurrentFile() throws(StorageError) {
        guard descriptor < 0 else { return }
        let path = Self.path(of: number, in: directory)
        let opened = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard opened >= 0 else { throw StorageError("cannot open the journal \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        fstat(opened, &info)
        var length = Int(info.st_size)
        if length == 0 {
            var header = [UInt8](repeating: 0, count: Self.fileHeaderBytes)
            Self.store(littleEndian: UInt64(Self.fileMagic), byteCount: 4, at: 0, in: &header)
            Self.store(littleEndian: number, byteCount: 8, at: 8, in: &header)
            guard header.withUnsafeBytes({ write(opened, $0.baseAddress, $0.count) }) == header.count else {
                let reason = String(cString: strerror(errno))
                Glibc.close(opened)
                unlink(path)
                throw StorageError("cannot write the journal \(path): \(reason)")
            }
            length = header.count
        }
        pthread_mutex_lock(lock)
        descriptor = opened
        // A new file's name is durable once the directory is synced too.
        directoryChanged = true
        pthread_mutex_unlock(lock)
        size = length
    }

    /// Ends the current file: appends go to the next from now on. Returns the number of the file
    /// ended, nil if it was never opened or holds no record.
    public func rotate() -> UInt64? {
        // A file holding no record yet is not ended: hand-offs retried while SQLite's lock is
        // held elsewhere would leave an empty file behind every 100 ms.
        guard descriptor >= 0, size > Self.fileHeaderBytes else { return nil }
        pthread_mutex_lock(lock)
        Glibc.close(descriptor)
        descriptor = -1
        pthread_mutex_unlock(lock)
        defer { number += 1 }
        size = 0
        return number
    }

    /// Pushes what was appended to the current file to the disk, and the directory if a file
    /// was created since; false if that failed. (A file `rotate()` ended is the database's to
    /// make durable: it takes in a file's records, syncs, and only then deletes it; or, when it
    /// cannot, `sync(through:in:)`.)
    ///
    /// The sync itself runs on a duplicate of the descriptor, outside the lock: `rotate()` and
    /// `createCurrentFile()` take the lock from inside the store's, which the event loop's
    /// appends take, so holding it through an `fdatasync` would make the loop wait the disk out.
    @discardableResult
    public func sync() -> Bool {
        pthread_mutex_lock(lock)
        let open = descriptor >= 0
        let current = open ? dup(descriptor) : -1
        let created = directoryChanged
        directoryChanged = false
        pthread_mutex_unlock(lock)
        // No duplicate (the process is out of descriptors): nothing was synced, and saying so
        // keeps the caller from counting the file's records durable.
        var synced = !open || current >= 0
        if current >= 0 {
            synced = fdatasync(current) == 0
            Glibc.close(current)
        }
        if created, !Self.syncDirectory(directory) {
            pthread_mutex_lock(lock)
            directoryChanged = true
            pthread_mutex_unlock(lock)
            synced = false
        }
        return synced
    }

    /// Pushes the files numbered up to `number` in `directory` to the disk, and the directory:
    /// for records the database could not take in, which wait in files `rotate()` ended.
    @discardableResult
    public static func sync(through number: UInt64, in directory: String) -> Bool {
        var synced = true
        for file in files(in: directory) where file <= number {
            let descriptor = open(path(of: file, in: directory), O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            synced = fdatasync(descriptor) == 0 && synced
            Glibc.close(descriptor)
        }
        return syncDirectory(directory) && synced
    }

    /// Syncs `directory` itself: the names of the files created in it.
    private static func syncDirectory(_ directory: String) -> Bool {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { Glibc.close(descriptor) }
        return fsync(descriptor) == 0
    }

    /// Deletes the files numbered up to `number` in `directory`.
    public static func remove(through number: UInt64, in directory: String) {
        for file in files(in: directory) where file <= number { unlink(path(of: file, in: directory)) }
    }

    /// The records of the file at `path`, in order, up to the first that is cut short or does not
    /// match its checksum; `intact` says whether the file ended where a record ended; `number`,
    /// the number its header gives (nil: no header — emptied or cut inside it, or written before
    /// files had headers). Throws for a file that cannot be read.
    public static func read(_ path: String) throws(StorageError) -> (records: [Record], intact: Bool, number: UInt64?) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StorageError("cannot open the journal \(path): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(descriptor) }
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw StorageError("cannot read the journal \(path): \(String(cString: strerror(errno)))") }
            if count == 0 { break }
            contents += buffer[0..<count]
        }
        return contents.withUnsafeBytes { bytes in
            var records: [Record] = []
            var offset = 0
            var number: UInt64?
            if bytes.count >= fileHeaderBytes, littleEndian(bytes, at: 0, byteCount: 4) == UInt64(fileMagic) {
                number = littleEndian(bytes, at: 8, byteCount: 8)
                offset = fileHeaderBytes
            }
            while offset < bytes.count {
                guard let (record, length) = decodeRecord(UnsafeRawBufferPointer(rebasing: bytes[offset...])) else {
                    return (records, false, number)
                }
                records.append(record)
                offset += length
            }
            return (records, true, number)
        }
    }

    // MARK: The format

    /// `record` as it is written: header and payload, in one array (the payload written after
    /// room left for the header, which is filled in last: each commit's bytes are copied once).
    static func encode(_ record: Record) -> [UInt8] {
        var payload: [UInt8] = []
        payload.reserveCapacity(headerBytes + 64 + record.chunks.reduce(0) { $0 + $1.blob.count + $1.room.utf8.count + 40 })
        payload.append(contentsOf: repeatElement(0, count: headerBytes))
        payload.append(varint: UInt64(record.rooms.count))
        for room in record.rooms {
            append(room.name, to: &payload)
            payload.append(varint: room.epoch)
            payload.append(varint: room.lastSeq)
            payload.append(varint: room.lastActive)
            if let topic = room.topic {
                payload.append(1)
                append(topic.text, to: &payload)
                append(topic.setBy, to: &payload)
                payload.append(varint: topic.time)
                payload.append(varint: topic.seq)
            } else {
                payload.append(0)
            }
        }
        payload.append(varint: UInt64(record.chunks.count))
        for chunk in record.chunks {
            append(chunk.room, to: &payload)
            payload.append(varint: chunk.firstSeq)
            payload.append(varint: chunk.lastSeq)
            payload.append(varint: chunk.oldestTime)
            payload.append(varint: UInt64(chunk.count))
            payload.append(varint: UInt64(chunk.bytes))
            payload.append(varint: UInt64(chunk.blob.count))
            payload += chunk.blob
        }
        let length = payload.count - headerBytes
        let sum = payload.withUnsafeBytes { checksum(UnsafeRawBufferPointer(rebasing: $0[headerBytes...])) }
        store(littleEndian: UInt64(magic), byteCount: 4, at: 0, in: &payload)
        store(littleEndian: UInt64(length), byteCount: 4, at: 4, in: &payload)
        store(littleEndian: sum, byteCount: 8, at: 8, in: &payload)
        return payload
    }

    /// The record at the start of `bytes` and its length; nil if it is cut short, fails its
    /// checksum, or is malformed.
    static func decodeRecord(_ bytes: UnsafeRawBufferPointer) -> (Record, Int)? {
        guard bytes.count >= headerBytes, littleEndian(bytes, at: 0, byteCount: 4) == UInt64(magic) else { return nil }
        let length = Int(littleEndian(bytes, at: 4, byteCount: 4))
        guard bytes.count - headerBytes >= length else { return nil }
        let payload = UnsafeRawBufferPointer(rebasing: bytes[headerBytes..<(headerBytes + length)])
        guard checksum(payload) == littleEndian(bytes, at: 8, byteCount: 8) else { return nil }
        var reader = ByteReader(bytes: payload, index: 0)
        guard let roomCount = reader.varint(), roomCount <= UInt64(length) else { return nil }
        var rooms: [RoomRecord] = []
        for _ in 0..<roomCount {
            guard let name = reader.string(), let epoch = reader.varint(), let lastSeq = reader.varint(),
                let lastActive = reader.varint(), let hasTopic = reader.byte()
            else { return nil }
            var topic: RoomTopic?
            if hasTopic == 1 {
                guard let text = reader.string(), let setBy = reader.string(), let time = reader.varint(), let seq = reader.varint()
                else { return nil }
                topic = RoomTopic(text: text, setBy: setBy, time: time, seq: seq)
            } else if hasTopic != 0 {
                return nil
            }
            rooms.append(RoomRecord(name: name, epoch: epoch, lastSeq: lastSeq, topic: topic, lastActive: lastActive))
        }
        guard let chunkCount = reader.varint(), chunkCount <= UInt64(length) else { return nil }
        var chunks: [EncodedChunk] = []
        for _ in 0..<chunkCount {
            guard let room = reader.string(), let firstSeq = reader.varint(), let lastSeq = reader.varint(),
                let oldestTime = reader.varint(), let count = reader.varint(), let counted = reader.varint(),
                let blob = reader.blob(), count <= UInt64(Int.max), counted <= UInt64(Int.max)
            else { return nil }
            chunks.append(
                EncodedChunk(
                    room: room, firstSeq: firstSeq, lastSeq: lastSeq, oldestTime: oldestTime, count: Int(count),
                    bytes: Int(counted), blob: blob))
        }
        guard reader.index == length else { return nil }
        return (Record(rooms: rooms, chunks: chunks), headerBytes + length)
    }

    /// A 64-bit checksum of `bytes`, eight at a time (FNV-1a's constants over words): it is there
    /// to find a record a power loss cut short or mangled, not to resist anyone.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        let prime: UInt64 = 0x0000_0100_0000_01B3
        var index = 0
        while index + 8 <= bytes.count {
            hash = (hash ^ bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self).littleEndian) &* prime
            hash ^= hash >> 29
            index += 8
        }
        while index < bytes.count {
            hash = (hash ^ UInt64(bytes[index])) &* prime
            index += 1
        }
        return hash ^ UInt64(bytes.count)
    }

    private static func append(_ string: String, to bytes: inout [UInt8]) {
        bytes.append(varint: UInt64(string.utf8.count))
        bytes += string.utf8
    }

    private static func store(littleEndian value: UInt64, byteCount: Int, at offset: Int, in bytes: inout [UInt8]) {
        for index in 0..<byteCount { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
    }

    private static func littleEndian(_ bytes: UnsafeRawBufferPointer, at offset: Int, byteCount: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<byteCount { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        return value
    }
}
