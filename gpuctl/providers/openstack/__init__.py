"""OpenStack Magnum: clusters and GPU node groups through openstacksdk's authenticated proxy."""
