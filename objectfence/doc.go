// Package objectfence fences writes to an S3-compatible object store: a
// deposed leader's late PUT of an object is refused by the store itself,
// because the check of the object's epoch and the write are one
// conditional request.
//
// A fenced object carries the epoch it was written under in its metadata
// ([MetaEpoch], the header x-amz-meta-termfence-epoch) and in a one-line
// header in front of the application's bytes (see [Magic]). [Store.Put]
// verifies the token (as [storageguard.Guard.Verify] does), reads the
// object's ETag and epoch, refuses an older epoch ([storageguard.ErrStale]),
// another leader's epoch of the same term ([storageguard.ErrConflict]) or
// another cluster's ([storageguard.ErrForeignCluster]), and writes with
// If-Match on the ETag it read, or If-None-Match: * when there is no
// object. If another writer got in between, the store answers 412 (or 409)
// and Put reads and decides again, a bounded number of times
// ([ErrContention]). [Store.Delete] writes a deletion marker the same way;
// [Store.Get] returns an object with its epoch; [Store.PutData],
// [Store.CommitOn] (or [Store.Commit]) and [Store.Garbage] are the manifest
// pattern: immutable data objects under unique names, made visible by one
// fenced write of a manifest. CommitOn writes the manifest only if it is
// still the version its writer read, so that Garbage never lists an object
// a manifest that can still be committed names.
//
// # Why not a storageguard.Fence
//
// A [storageguard.Fence] admits an epoch and then holds it while an
// arbitrary write function runs: Do's check and write are one step because
// the fence keeps newer epochs out until the function returns. An object
// store holds nothing between requests, and S3 gives no lock: the only
// step that is atomic at the store is one conditional request. So the
// fence here is per object, and the write it guards is the one PUT that
// carries the condition; a Do(resource, ep, write) whose write could be
// anything would be unfenced. objectfence therefore has its own API, whose
// every write is that conditional PUT, and implements no storageguard.Fence.
// It uses storageguard's rule ([storageguard.Decide]), its token checks and
// its errors, so callers match refusals as they do for every other fence.
//
// # Guarantees
//
// Through this package, no write of an object under an epoch e lands after
// a write of the same key under a newer epoch of the same cluster landed:
// the write is conditioned on the ETag of the object whose epoch was
// checked, and the store refuses it if any write replaced that object in
// between. This needs two things of the store, which S3 (since 2024) and
// versitygw give:
//
//   - PUT with If-Match: <ETag> and If-None-Match: * decided atomically
//     with the write (412 Precondition Failed, or 409 on a concurrent
//     conflict, otherwise);
//   - an ETag that changes whenever the object's bytes change (S3's MD5 of
//     the bytes for single-part uploads). Every fenced write's bytes are
//     unique (the epoch and a random nonce are in the header), so a hash
//     of the bytes names one write; without the epoch in the bytes a newer
//     write of the same bytes would carry the older write's ETag, and a
//     deposed writer's If-Match would match it.
//
// A Put accepts an epoch only after two HEADs report the same ETag, and
// decides on the second's metadata: versitygw's posix backend reads an
// object's metadata and its ETag one after the other, by path, so one HEAD
// racing a write can pair the older write's epoch with the newer write's
// ETag. A refusal needs one HEAD (an epoch that was written is a lower
// bound). A Store remembers the ETag of its own last write of a key
// ([Config.CacheSize]): a single writer's next Put conditions on it with no
// read at all, which is safe because the condition fails (412) unless the
// object is still that write.
//
// Tokens are verified before the store is touched; with a signing
// Verifier a forged token with a huge term cannot raise an object's epoch.
// An object whose fencing metadata or header is malformed (read back from
// the store, so untrusted) is refused with [ErrBadObject], never written
// over and never returned.
//
// # Keys
//
// A key is in one canonical form, so that one object has one key: '/'
// separates non-empty segments (no leading, doubled or trailing '/'), and
// no segment is "." or "..". Anything else is refused with
// storageguard.ErrBadResource before the store is touched: a store that
// maps keys to file paths (versitygw's posix backend) names one file by
// "p//x", "p/./x", "/p/x" and "p/q/../x" but orders writes to each
// spelling apart, so a deposed writer's Put under one spelling could land
// after a newer epoch's under another.
//
// # Permissions
//
// A fenced write reads before it writes, so the credentials need
// s3:GetObject and s3:PutObject on the keys, and s3:ListBucket on the
// bucket: without s3:ListBucket, S3 answers the HEAD of a missing key
// with 403 Forbidden instead of 404, and Put cannot tell a key that does
// not exist from one it may not read, so it cannot create keys (the 403 is
// returned as the store's error). Garbage lists the prefix (s3:ListBucket)
// and the caller deletes what it returns (s3:DeleteObject).
//
// # Non-guarantees
//
//   - A writer that bypasses this package (a plain PUT, a copy, a lifecycle
//     rule, an operator with the console) is not fenced, and can reset an
//     object's epoch: an object without epoch metadata is taken as never
//     fenced, and any epoch may write it.
//   - A store without conditional writes, or one that answers If-Match
//     without deciding it atomically with the write, or whose ETag does not
//     change with the bytes (a weak ETag of size and mtime), cannot carry
//     this fence: the package cannot detect that, and then fences nothing.
//   - Delete does not remove the object: an S3 DELETE forgets the key's
//     epoch, after which a writer of any older epoch could create it again.
//     It writes a deletion marker instead. Conditional DELETE (If-Match)
//     exists on S3 and versitygw answers it, but versitygw v1.8.0's posix
//     backend checks the ETag outside the lock that orders its PUTs, so it
//     is not used.
//   - Reads are not fenced: Get returns what the store holds with its
//     epoch; a reader decides whether to trust that epoch.
//   - Garbage relies on listings, which some stores make eventually
//     consistent: an object may be missing from one call's answer. Liveness
//     is never decided by a listing, only by the manifest.
//   - Fencing refuses, it does not undo: a deposed writer's data objects
//     (PutData) land; they are invisible until a manifest names them, and
//     only a fenced Commit can.
//   - An error that is neither a refusal nor a store's answer (a network
//     error, a context ended while the PUT was out) leaves the outcome of
//     that write unknown.
package objectfence
