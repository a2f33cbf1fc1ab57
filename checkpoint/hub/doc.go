// Package hub uploads a local directory to a Hugging Face Hub model
// repository as one commit, through the Hub's HTTP API, and returns the
// commit's sha (an evaluation that pins an exact revision needs it).
//
// The protocol is the one huggingface_hub speaks (read from its
// hf_api.py, _commit_api.py and lfs.py; no code is shared):
//
//  1. GET /api/models/{repo}/revision/{rev}: the branch head and its files
//     (POST /api/repos/create and /api/models/{repo}/branch/{rev} make a
//     missing repository or branch).
//  2. POST /api/models/{repo}/preupload/{rev}: for each file, from its size
//     and first 512 bytes, whether it goes into git ("regular") or into
//     large-file storage ("lfs"), and the oid it has now, so unchanged
//     files are left out.
//  3. POST /{repo}.git/info/lfs/objects/batch (Git LFS batch API, transfers
//     "basic" and "multipart"): where to upload each large object; objects
//     the Hub already holds come back without actions and are skipped.
//     A basic object is one PUT; a multipart one is a PUT per part (to the
//     numbered URLs of the action's header, chunk_size bytes each) and a
//     POST of the parts' ETags to the action's href; then the optional
//     verify POST.
//  4. POST /api/models/{repo}/commit/{rev}: NDJSON, a header line (summary,
//     description, parentCommit) then one line per file ("file" with base64
//     content, "lfsFile" with its sha256 oid and size, "deletedFile").
//
// A commit is one request made after every upload has finished, so a push
// that fails part way leaves the branch as it was; large objects already
// uploaded stay on the Hub, and the next push finds them there (step 3)
// and uploads only the rest. The commit names its parent, so it cannot
// silently overwrite a concurrent commit, and a commit whose response was
// lost is recognized rather than made twice.
//
// The token comes from HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN), else
// from the file `hf auth login` writes: HF_TOKEN_PATH, else $HF_HOME/token,
// else $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token.
//
// Storage through Xet, which huggingface_hub prefers when hf_xet is
// installed, is not spoken: the Hub accepts LFS transfers for every
// repository.
package hub
