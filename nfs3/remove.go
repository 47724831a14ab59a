package nfs3

// REMOVE (RFC 1813 section 3.3.12, REMOVE: remove a file) takes DirOpArgs and
// returns WccRes (REMOVE3res: the directory's wcc_data in both arms).
