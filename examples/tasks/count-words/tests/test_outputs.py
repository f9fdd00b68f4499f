from pathlib import Path


def test_count_file_exists():
    assert Path("/app/count.txt").is_file()


def test_count_is_the_number_of_words():
    assert Path("/app/count.txt").read_text() == "10\n"
